--[[
  register_queue: add a queue's name to the set of known queues, which a
  broker that takes over reads (broker/take_over.cpp), fenced like every
  write: a round of a deposed leader that arrives late registers nothing.
  Outside a Redis Cluster only, where a script may take keys of any slot:
  behind a Cluster the set is in no queue's slot, the broker sends a plain
  SADD, and the queue's epoch is the only fence.

  KEYS[1]  jobs    hash  the queue's jobs: not read or written; it names the
                         queue (its hash tag) for the fence
  KEYS[2]  queues  set   every known queue's name (dueq:queues)

  ARGV[1]  the queue's name: the hash tag of KEYS[1]

  Returns  1 when added, 0 when it was known already
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
local name = ARGV[1]
if #ARGV ~= 1 or #KEYS ~= 2 or not name or KEYS[1] ~= "dueq:{" .. name .. "}:jobs" then
  return redis.error_reply("ERR dueq bad-args register_queue: expected the queue's jobs key and the queue's name")
end
return redis.call("SADD", KEYS[2], name)
