--[[
  stats: one queue's counts, read atomically.

  KEYS[1]  scheduled   zset
  KEYS[2]  ready       zset
  KEYS[3]  leased      zset
  KEYS[4]  dead        zset
  KEYS[5]  stats       hash

  ARGV[1]  now ms

  Returns  {scheduled, waiting, in_flight, dead, next_due, accepted, done,
            retried, stale_acks, cancelled, purged}
           scheduled = due in the future; waiting = due now, not leased;
           next_due = earliest scheduled due ms or -1
  Errors   "ERR dueq bad-args <what>"
]]
local now = tonumber(ARGV[1])
if not now then return redis.error_reply("ERR dueq bad-args stats: expected now") end
local future = redis.call("ZCOUNT", KEYS[1], "(" .. now, "+inf")
local overdue = redis.call("ZCOUNT", KEYS[1], "-inf", now)
local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local next_due = -1
if head[2] then next_due = tonumber(head[2]) end
local c = redis.call("HMGET", KEYS[5], "accepted", "done", "retried", "stale_acks", "cancelled", "purged")
return {future, redis.call("ZCARD", KEYS[2]) + overdue, redis.call("ZCARD", KEYS[3]), redis.call("ZCARD", KEYS[4]),
  next_due, tonumber(c[1] or 0), tonumber(c[2] or 0), tonumber(c[3] or 0), tonumber(c[4] or 0),
  tonumber(c[5] or 0), tonumber(c[6] or 0)}
