--[[
  lead: take or renew the leader lease (broker/loop/leadership.hpp). One broker
  leads; the others stand by and ask again until the lease lapses. A new
  leader gets the next epoch: every script that writes checks it against
  the queue's (lib/fence.lua), so a deposed leader writes nothing.

  KEYS[1]  holder  string "<epoch> <instance> <endpoint>", expires with the lease
  KEYS[2]  epochs  string counter: the last epoch given

  ARGV[1]  the asking broker's instance id (1..64 bytes, no space)
  ARGV[2]  lease ms (100..600000)
  ARGV[3]  the epoch it leads with, 0 when it does not lead
  ARGV[4]  the endpoint it tells clients to use (0..256 bytes, no space; may be empty)

  Returns  {epoch, holder epoch, holder instance, holder endpoint}: epoch is
           the caller's (renewed; taken back after it lapsed if no broker
           led since; or new when the lease was free and it asked with 0),
           or 0 when another broker leads or led since (the caller must
           stand down before it asks again with 0)
  Errors   "ERR dueq bad-args <what>"
]]
local instance, lease_ms, epoch, endpoint = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
if #ARGV ~= 4 or #instance < 1 or #instance > 64 or string.find(instance, " ", 1, true) or not lease_ms
    or lease_ms < 100 or lease_ms > 600000 or lease_ms ~= math.floor(lease_ms) or not epoch or epoch < 0
    or epoch ~= math.floor(epoch) or #endpoint > 256 or string.find(endpoint, " ", 1, true) then
  return redis.error_reply("ERR dueq bad-args lead: expected an instance id, a lease of 100..600000 ms, an epoch >= 0 and an endpoint")
end
local holder = redis.call("GET", KEYS[1])
if holder then
  local held_epoch, held_instance, held_endpoint = string.match(holder, "^(%d+) (%S+) ?(%S*)$")
  if held_instance == instance and tonumber(held_epoch) == epoch then
    redis.call("PEXPIRE", KEYS[1], lease_ms)
    return {epoch, epoch, instance, held_endpoint}
  end
  return {0, tonumber(held_epoch) or 0, held_instance or "", held_endpoint or ""}
end
if epoch ~= 0 then
  -- Lapsed (Redis was unreachable or refused writes): taken back with the
  -- same epoch when no broker led since, for then none wrote with another.
  if tonumber(redis.call("GET", KEYS[2]) or "0") ~= epoch then return {0, 0, "", ""} end
  redis.call("SET", KEYS[1], epoch .. " " .. instance .. " " .. endpoint, "PX", lease_ms)
  return {epoch, epoch, instance, endpoint}
end
local new_epoch = redis.call("INCR", KEYS[2])
redis.call("SET", KEYS[1], new_epoch .. " " .. instance .. " " .. endpoint, "PX", lease_ms)
return {new_epoch, new_epoch, instance, endpoint}
