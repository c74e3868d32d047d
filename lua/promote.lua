--[[
  promote: move jobs whose due time has come from the schedule to the ready
  set, oldest due first, at most LIMIT per call.

  KEYS[1]  scheduled   zset  id -> due ms
  KEYS[2]  ready       zset  id -> due ms

  ARGV[1]  now ms
  ARGV[2]  limit (1..5000)

  Returns  {moved, next_due}: next_due is the due ms of the earliest job left
           in the schedule, or -1 when the schedule is empty
  Errors   "ERR dueq bad-args <what>"
]]
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if not now or not limit or limit < 1 or limit > 5000 then
  return redis.error_reply("ERR dueq bad-args promote: expected now and a limit of 1..5000")
end
local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "WITHSCORES", "LIMIT", 0, limit)
local moved = #due / 2
if moved > 0 then
  -- ZRANGEBYSCORE from -inf returned ranks 0..moved-1.
  redis.call("ZREMRANGEBYRANK", KEYS[1], 0, moved - 1)
  for i = 1, #due, 2000 do
    -- WITHSCORES gives member, score pairs; ZADD wants score, member.
    local args = {}
    for j = i, math.min(i + 1999, #due), 2 do
      args[#args + 1] = due[j + 1]
      args[#args + 1] = due[j]
    end
    redis.call("ZADD", KEYS[2], unpack(args))
  end
end
local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local next_due = -1
if head[2] then next_due = tonumber(head[2]) end
return {moved, next_due}
