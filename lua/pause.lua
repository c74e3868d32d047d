--[[
  pause: pause or resume one queue (`dueq pause`, `dueq resume`). A paused
  queue keeps accepting and scheduling jobs; lease.lua leases none of it and
  enqueue.lua leases none at once, until it is resumed. The flag lives in
  Redis, so it holds across broker restarts and take-overs.

  KEYS[1]  paused  string  ms when the queue was paused; absent while it runs

  ARGV[1]  "pause" or "resume"
  ARGV[2]  now ms (written as the time it was paused)

  Returns  {changed, paused since ms}: changed 1 when the call changed the
           state, 0 when the queue was already so; since is 0 while it runs
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
local now = tonumber(ARGV[2])
if #ARGV ~= 2 or (ARGV[1] ~= "pause" and ARGV[1] ~= "resume") or not now or now < 0 then
  return redis.error_reply("ERR dueq bad-args pause: expected pause or resume, and now ms")
end
local since = tonumber(redis.call("GET", KEYS[1]) or "0")
if ARGV[1] == "pause" then
  if since > 0 then return {0, since} end
  redis.call("SET", KEYS[1], ARGV[2])
  return {1, now}
end
if since == 0 then return {0, 0} end
redis.call("DEL", KEYS[1])
return {1, 0}
