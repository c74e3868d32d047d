--[[
  sweep: forget done and cancelled jobs whose retention period is over, and
  the oldest of those past MAX kept, at most LIMIT of each per call (oldest
  first): a sustained rate times the retention would otherwise decide how
  much memory Redis needs. Entries finished within the duplicate window are
  kept whatever MAX says: their ids answer a resent enqueue "duplicate".

  KEYS[1]  done        zset  id -> finished ms
  KEYS[2]  cancelled   zset  id -> finished ms
  KEYS[3]  stats       hash  ("forgotten_early" counts ids removed by MAX
                             before their retention ended)

  ARGV[1]  cutoff ms: entries finished before it are removed
  ARGV[2]  limit (1..10000)
  ARGV[3]  max kept per set (>= 1)
  ARGV[4]  window start ms (>= cutoff): entries finished at or after it are
           never removed for MAX

  Returns  {removed done, removed cancelled, removed by MAX before their
           retention, earliest finish ms left in either set or -1 when both
           are empty}; call again while either of the first two equals the
           limit (the last tells when a sweep can next remove anything)
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
local cutoff = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local max_kept = tonumber(ARGV[3])
local window_start = tonumber(ARGV[4])
if not cutoff or not limit or limit < 1 or limit > 10000 or not max_kept or max_kept < 1 or not window_start
    or window_start < cutoff or #ARGV ~= 4 then
  return redis.error_reply("ERR dueq bad-args sweep: expected a cutoff, a limit of 1..10000, a max kept >= 1 and a window start >= the cutoff")
end
local out = {0, 0, 0, -1}
for k = 1, 2 do
  -- Counting first keeps the work bounded without materialising the ids.
  local old = redis.call("ZCOUNT", KEYS[k], "-inf", "(" .. ARGV[1])
  local outside_window = redis.call("ZCOUNT", KEYS[k], "-inf", "(" .. ARGV[4])
  local over = math.min(redis.call("ZCARD", KEYS[k]) - max_kept, outside_window)
  local remove = math.min(math.max(old, over), limit)
  if remove > 0 then redis.call("ZREMRANGEBYRANK", KEYS[k], 0, remove - 1) end
  out[k] = remove
  if remove > old then out[3] = out[3] + remove - old end
  local first = redis.call("ZRANGE", KEYS[k], 0, 0, "WITHSCORES")
  if first[2] then
    local finished = tonumber(first[2])
    if out[4] < 0 or finished < out[4] then out[4] = finished end
  end
end
if out[3] > 0 then redis.call("HINCRBY", KEYS[3], "forgotten_early", out[3]) end
return out
