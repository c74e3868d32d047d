--[[
  purge: delete dead-lettered jobs for good, by id or by age. The count of
  purged jobs is kept so the books still balance.

  KEYS[1]  dead        zset  id -> time of death ms
  KEYS[2]  stats       hash
  KEYS[3]  jobs        hash
  KEYS[4]  tokens      hash
  KEYS[5]  attempts    hash
  KEYS[6]  errors      hash
  KEYS[7]  error logs  hash
  KEYS[8]  unconfirmed hash  id -> deliveries that ended unstarted
  KEYS[9]  snoozes     hash  id -> times the job snoozed (lua/nack.lua)

  ARGV[1]  N (1..1000), or 0 to purge by age
  ARGV[2..N+1]  ids (when N > 0)
  ARGV[2], ARGV[3]  (when N = 0) cutoff ms: purge jobs dead before it;
           limit (1..1000)

  Returns  array of the purged ids
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
local n = tonumber(ARGV[1])
if not n or n < 0 or n > 1000 then
  return redis.error_reply("ERR dueq bad-args purge: expected N of 0..1000")
end
local ids
if n == 0 then
  local cutoff = tonumber(ARGV[2])
  local limit = tonumber(ARGV[3])
  if not cutoff or not limit or limit < 1 or limit > 1000 then
    return redis.error_reply("ERR dueq bad-args purge: expected a cutoff and a limit of 1..1000")
  end
  ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", "(" .. cutoff, "LIMIT", 0, limit)
else
  if #ARGV ~= n + 1 then return redis.error_reply("ERR dueq bad-args purge: expected N ids") end
  ids = {}
  for i = 2, n + 1 do ids[#ids + 1] = ARGV[i] end
end
local out = {}
for _, id in ipairs(ids) do
  if redis.call("ZREM", KEYS[1], id) == 1 then out[#out + 1] = id end
end
if #out > 0 then
  for k = 3, 9 do redis.call("HDEL", KEYS[k], unpack(out)) end
  redis.call("HINCRBY", KEYS[2], "purged", #out)
end
return out
