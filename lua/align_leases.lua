--[[
  align_leases: at a take-over, bring every lease deadline to CAP, the end
  of a grace period from now (broker/loop/scheduler.hpp). The new leader
  cannot know which worker holds what until workers say HELLO to it:
  - a later deadline (a full lease_ttl written by the broker before) comes
    down to CAP: the jobs a reconnecting worker reports are extended again,
    the rest (held by no one) are reclaimed at CAP instead of a whole TTL on;
  - an earlier one, lapsed while no broker led (a delivery whose start the
    dead broker never recorded), goes up to CAP: its worker may still run it,
    or hold its result, and reports or resends it within the grace period,
    instead of the job being delivered again at the take-over.

  KEYS[1]  leased      zset  id -> deadline ms (and an encoding pin at +inf)

  ARGV[1]  cap deadline ms
  ARGV[2]  limit (1..5000)

  Returns  {aligned}: number of leases moved to CAP (call again while it
           equals the limit)
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
if #ARGV ~= 2 or not cap or not limit or limit < 1 or limit > 5000 or limit ~= math.floor(limit) then
  return redis.error_reply("ERR dueq bad-args align_leases: expected a cap and a limit of 1..5000")
end
local ids = leases_after(KEYS[1], "(" .. cap, limit, false)
if #ids < limit then
  local earlier = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", "(" .. cap, "LIMIT", 0, limit - #ids)
  for _, id in ipairs(earlier) do ids[#ids + 1] = id end
end
for _, id in ipairs(ids) do
  redis.call("ZADD", KEYS[1], "XX", cap, id)
end
return {#ids}
