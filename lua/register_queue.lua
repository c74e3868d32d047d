--[[
  register_queue: add a queue's name to the set of known queues, which a
  broker that takes over reads (broker/take_over.cpp), fenced by the
  leader's epoch counter: a registration of a deposed leader that arrives
  late (held in its link while a standby took over) adds nothing. The set
  and the counter share the {leader} slot, so this holds behind a Redis
  Cluster too; there the broker sends a new queue's first write only once
  this call answered (broker/loop/enqueuer.hpp, ready_for_writes).

  KEYS[1]  queues   set     every known queue's name (dueq:{leader}:queues)
  KEYS[2]  epochs   string  the leader's epoch counter (dueq:{leader}:epochs,
                            lua/lead.lua): the last epoch given

  ARGV[1]  the queue's name

  Returns  1 when added, 0 when it was known already
  Errors   "ERR dueq bad-args <what>"; "ERR dueq fenced <what>" and nothing
           written when a newer epoch was given than the sender's
  Fenced   KEYS take the epoch key of the {leader} tag, dueq:{leader}:epoch
           (and outside a Redis Cluster the counter again) and ARGV the
           sender's leader epoch, last (lib/fence.lua); the counter is
           compared here as well, since behind a Cluster the fence itself
           does not read it
]]
--! include lib/fence.lua
local name = ARGV[1]
if #ARGV ~= 1 or #KEYS ~= 2 or not name or name == "" or KEYS[1] ~= "dueq:{leader}:queues"
    or KEYS[2] ~= "dueq:{leader}:epochs" then
  return redis.error_reply("ERR dueq bad-args register_queue: expected the queue set, the leader's epoch counter and the queue's name")
end
local newest = tonumber(redis.call("GET", KEYS[2]) or "0")
if newest > fence_epoch then
  return redis.error_reply("ERR dueq fenced: leader epoch " .. fence_epoch .. " was deposed by epoch " .. newest)
end
return redis.call("SADD", KEYS[1], name)
