--[[
  resign: give up the leader lease at a clean stop, so that a standby takes
  over at once instead of when the lease would have lapsed.

  KEYS[1]  holder  string "<epoch> <instance> <endpoint>" (lua/lead.lua)

  ARGV[1]  the broker's instance id
  ARGV[2]  the epoch it leads with (>= 1)

  Returns  1 when its lease was removed, 0 when it did not hold it
  Errors   "ERR dueq bad-args <what>"
]]
local epoch = tonumber(ARGV[2])
if #ARGV ~= 2 or #ARGV[1] < 1 or not epoch or epoch < 1 then
  return redis.error_reply("ERR dueq bad-args resign: expected an instance id and an epoch >= 1")
end
local held_epoch, held_instance = string.match(redis.call("GET", KEYS[1]) or "", "^(%d+) (%S+)")
if held_instance == ARGV[1] and tonumber(held_epoch) == epoch then return redis.call("DEL", KEYS[1]) end
return 0
