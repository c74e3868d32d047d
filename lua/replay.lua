--[[
  replay: dead-lettered jobs go back to ready with their attempts reset and
  the same id (their error log is kept). Ids that are not dead are skipped.

  KEYS[1]  dead              zset
  KEYS[2]  ready             zset
  KEYS[3]  stats             hash
  KEYS[4]  jobs              hash
  KEYS[5]  attempts          hash
  KEYS[6]  cancel requested  set
  KEYS[7]  unconfirmed       hash  id -> deliveries that ended unstarted
  KEYS[8]  snoozes           hash  id -> times the job snoozed (lua/nack.lua)

  ARGV[1]  now ms (the jobs are due again from now)
  ARGV[2]  N (1..1000), or 0 with ARGV[3] = limit to replay the oldest
           `limit` dead jobs of the queue (1..1000)
  ARGV[3..N+2]  ids (when N > 0)

  Returns  array of the replayed ids
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
local n = tonumber(ARGV[2])
if not tonumber(ARGV[1]) or not n or n < 0 or n > 1000 then
  return redis.error_reply("ERR dueq bad-args replay: expected now and N of 0..1000")
end
local ids
if n == 0 then
  local limit = tonumber(ARGV[3])
  if not limit or limit < 1 or limit > 1000 then
    return redis.error_reply("ERR dueq bad-args replay: expected a limit of 1..1000")
  end
  ids = redis.call("ZRANGE", KEYS[1], 0, limit - 1)
else
  if #ARGV ~= n + 2 then return redis.error_reply("ERR dueq bad-args replay: expected N ids") end
  ids = {}
  for i = 3, n + 2 do ids[#ids + 1] = ARGV[i] end
end
local out = {}
for _, id in ipairs(ids) do
  if redis.call("HEXISTS", KEYS[4], id) == 1 and redis.call("ZREM", KEYS[1], id) == 1 then
    redis.call("ZADD", KEYS[2], ARGV[1], id)
    redis.call("HDEL", KEYS[5], id)
    redis.call("HDEL", KEYS[7], id)
    redis.call("HDEL", KEYS[8], id)
    redis.call("SREM", KEYS[6], id)
    out[#out + 1] = id
  end
end
if #out > 0 then redis.call("HINCRBY", KEYS[3], "replayed", #out) end
return out
