--[[
  reclaim: leases whose deadline has passed (the worker died, hung, never
  received the task, or the broker that leased it is gone) count as a failed
  attempt: the job goes back to ready at once, or to the dead-letter set when
  its attempts are used up (a poison job that keeps killing workers). A job
  a user asked to cancel (mark "cx") ends cancelled.

  KEYS[1]  leased      zset  id -> deadline ms
  KEYS[2]  ready       zset
  KEYS[3]  dead        zset
  KEYS[4]  stats       hash
  KEYS[5]  job prefix

  ARGV[1]  now ms
  ARGV[2]  limit (1..5000)
  ARGV[3]  retention seconds for a cancelled record (0 = delete at once)

  Returns  {requeued, dead, next_deadline}: next_deadline is the earliest
           lease deadline left, or -1 when nothing is leased
  Errors   "ERR dueq bad-args <what>"
]]
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local retention = tonumber(ARGV[3])
if not now or not limit or limit < 1 or limit > 5000 or not retention or retention < 0 then
  return redis.error_reply("ERR dueq bad-args reclaim: expected now, a limit of 1..5000 and a retention")
end
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, limit)
local requeued, dead = 0, 0
if #ids > 0 then
  redis.call("ZREMRANGEBYRANK", KEYS[1], 0, #ids - 1)
end
for _, id in ipairs(ids) do
  local key = KEYS[5] .. id
  local f = redis.call("HMGET", key, "s", "a", "m", "el", "cx")
  if f[1] == "leased" and f[5] then
    redis.call("HINCRBY", KEYS[4], "cancelled", 1)
    if retention > 0 then
      redis.call("HSET", key, "s", "cancelled", "e", "cancelled by a user", "f", now)
      redis.call("HDEL", key, "p")
      redis.call("EXPIRE", key, retention)
    else
      redis.call("DEL", key)
    end
  elseif f[1] == "leased" then
    local attempt = tonumber(f[2])
    local reason = "lease expired (worker lost, hung or unreachable)"
    local log = (f[4] or "") .. "attempt " .. attempt .. ": " .. reason .. "\n"
    if #log > 8192 then log = string.sub(log, -8192) end
    if attempt >= tonumber(f[3]) then
      redis.call("ZADD", KEYS[3], now, id)
      redis.call("HSET", key, "s", "dead", "e", "attempts exhausted (" .. attempt .. "): " .. reason, "el", log, "f", now)
      dead = dead + 1
    else
      redis.call("ZADD", KEYS[2], ARGV[1], id)
      redis.call("HSET", key, "s", "ready", "e", reason, "el", log)
      requeued = requeued + 1
    end
  end
end
if requeued > 0 then redis.call("HINCRBY", KEYS[4], "retried", requeued) end
if dead > 0 then redis.call("HINCRBY", KEYS[4], "dead", dead) end
local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local next_deadline = -1
if head[2] then next_deadline = tonumber(head[2]) end
return {requeued, dead, next_deadline}
