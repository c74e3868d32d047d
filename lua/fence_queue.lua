--[[
  fence_queue: a new leader raises each known queue's epoch before it serves
  (broker/loop/leadership.hpp), so that from then on the deposed leader's calls
  on that queue fail (lib/fence.lua) even where the new one has not written
  yet.

  KEYS[1]  epoch  string: the epoch of the queue's leader

  ARGV[1]  the new leader's epoch (>= 1)

  Returns  1 when raised, 0 when it already was that epoch
  Errors   "ERR dueq bad-args <what>"; "ERR dueq fenced <what>" when a
           newer leader raised it already
]]
local epoch = tonumber(ARGV[1])
if #ARGV ~= 1 or not epoch or epoch < 1 or epoch ~= math.floor(epoch) then
  return redis.error_reply("ERR dueq bad-args fence_queue: expected an epoch >= 1")
end
local stored = tonumber(redis.call("GET", KEYS[1]) or "0")
if stored > epoch then
  return redis.error_reply("ERR dueq fenced: leader epoch " .. epoch .. " was deposed by epoch " .. stored)
end
if stored == epoch then return 0 end
redis.call("SET", KEYS[1], epoch)
return 1
