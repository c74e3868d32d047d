--[[
  cap_leases: after a broker restart, bring every lease deadline later than
  CAP down to CAP. Jobs that a reconnecting worker reports get their lease
  extended again; the rest (leased by the dead broker, held by no one) expire
  at CAP and are reclaimed after a short grace period instead of a full TTL.

  KEYS[1]  leased      zset  id -> deadline ms (and an encoding pin at +inf)

  ARGV[1]  cap deadline ms
  ARGV[2]  limit (1..5000)

  Returns  {capped}: number of leases capped (call again while it equals
           the limit)
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/encoding_pin.lua
local cap = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if not cap or not limit or limit < 1 or limit > 5000 then
  return redis.error_reply("ERR dueq bad-args cap_leases: expected a cap and a limit of 1..5000")
end
local ids = leases_after(KEYS[1], "(" .. cap, limit, false)
for _, id in ipairs(ids) do
  redis.call("ZADD", KEYS[1], "XX", cap, id)
end
return {#ids}
