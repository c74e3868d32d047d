--[[
  cancel: a user cancels a job. A scheduled or ready job ends "cancelled" at
  once. A leased job is marked cancel-requested: the broker tells its worker
  to stop, and the job ends cancelled when that delivery's result or lease
  expiry arrives (nack and reclaim honour the mark). Done, dead or cancelled
  jobs are left alone.

  KEYS[1]  scheduled   zset
  KEYS[2]  ready       zset
  KEYS[3]  stats       hash
  KEYS[4]  job prefix

  ARGV[1]  now ms
  ARGV[2]  job id
  ARGV[3]  retention seconds for the cancelled record (0 = delete at once)

  Returns  {status, token}: status 1 cancelled, 2 cancel requested (leased;
           token = the delivery to stop), 0 not found, -1 already finished
           (done, dead or cancelled)
  Errors   "ERR dueq bad-args <what>"
]]
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[3])
if not now or not retention or retention < 0 or not ARGV[2] or ARGV[2] == "" then
  return redis.error_reply("ERR dueq bad-args cancel: expected now, id and retention")
end
local id = ARGV[2]
local key = KEYS[4] .. id
local f = redis.call("HMGET", key, "s", "k")
local state = f[1]
if not state then return {0, 0} end
if state == "leased" then
  redis.call("HSET", key, "cx", 1)
  return {2, tonumber(f[2])}
end
if state == "scheduled" then
  redis.call("ZREM", KEYS[1], id)
elseif state == "ready" then
  redis.call("ZREM", KEYS[2], id)
else
  return {-1, 0}
end
redis.call("HINCRBY", KEYS[3], "cancelled", 1)
if retention > 0 then
  redis.call("HSET", key, "s", "cancelled", "f", now, "e", "cancelled by a user")
  redis.call("HDEL", key, "p")
  redis.call("EXPIRE", key, retention)
else
  redis.call("DEL", key)
end
return {1, 0}
