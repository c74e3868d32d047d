--[[
  sweep: forget done and cancelled jobs whose retention period is over, and
  the oldest of those past MAX kept, at most LIMIT of each per call (oldest
  first): a sustained rate times the retention would otherwise decide how
  much memory Redis needs.

  KEYS[1]  done        zset  id -> finished ms
  KEYS[2]  cancelled   zset  id -> finished ms

  ARGV[1]  cutoff ms: entries finished before it are removed
  ARGV[2]  limit (1..10000)
  ARGV[3]  max kept per set (>= 1)

  Returns  {removed done, removed cancelled}; call again while either
           equals the limit
  Errors   "ERR dueq bad-args <what>"
]]
local cutoff = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local max_kept = tonumber(ARGV[3])
if not cutoff or not limit or limit < 1 or limit > 10000 or not max_kept or max_kept < 1 or #ARGV ~= 3 then
  return redis.error_reply("ERR dueq bad-args sweep: expected a cutoff, a limit of 1..10000 and a max kept >= 1")
end
local out = {}
for k = 1, 2 do
  -- Counting first keeps the work bounded without materialising the ids.
  local old = redis.call("ZCOUNT", KEYS[k], "-inf", "(" .. ARGV[1])
  local over = redis.call("ZCARD", KEYS[k]) - max_kept
  if over > old then old = over end
  if old > limit then old = limit end
  if old > 0 then redis.call("ZREMRANGEBYRANK", KEYS[k], 0, old - 1) end
  out[k] = old
end
return out
