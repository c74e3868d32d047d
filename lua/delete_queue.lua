--[[
  delete_queue: remove an empty queue (`dueq queue delete`): its keys and
  its name in the registry of known queues, in one step, or nothing when it
  holds a job that is scheduled, ready, running or dead. Its finished jobs'
  ids (done and cancelled, kept for the retention period) go with it: an
  enqueue that reuses one of their ids afterwards makes a new job. Its epoch
  key stays (the fence against a deposed leader). Outside a Redis Cluster
  only: the registry is in another slot (the broker refuses the command
  behind a Cluster).

  KEYS[1]  schedule          zset  partition -> lower bound of its earliest due ms
  KEYS[2]  legacy scheduled  zset
  KEYS[3]  ready             zset
  KEYS[4]  leased            zset  (its encoding pin, at +inf, is not a job)
  KEYS[5]  dead              zset
  KEYS[6]  stats             hash  ("scheduled" counts the schedule)
  KEYS[7..31] deleted with it: done, cancelled, jobs, tokens, attempts,
           errors, error logs, cancel requested, started, unconfirmed,
           paused, rate, cron, history, the per-key held, running,
           parked (and its counts per key, KEYS[23]..":per_key") and
           limits (lib/keys.lua), and fair dispatch's virtual time (and its
           finish tags, KEYS[25]..":finish") and weights (lib/fair.lua),
           and the per-key rates, buckets and wakes (lib/keys.lua), and
           the snooze counts (lua/nack.lua) and the done jobs' results
           (lua/ack.lua)
  KEYS[32] groups            hash  flows and batches (lib/group.lua), deleted
                                   with every key named from it (a batch
                                   left open, settled groups kept for a look)
  KEYS[33] queues            set   every known queue's name (dueq:{leader}:queues)

  ARGV[1]  the queue's name

  Returns  {1} deleted, or {0, scheduled, ready, running, dead} when it is
           not empty (nothing changed)
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key and the leader's epoch counter
           and ARGV the sender's leader epoch, last (lib/fence.lua);
           "ERR dueq fenced <what>" and nothing written when the sender was
           deposed
]]
--! include lib/fence.lua
local name = ARGV[1]
if #ARGV ~= 1 or #KEYS ~= 33 or not name or name == "" or KEYS[33] ~= "dueq:{leader}:queues" then
  return redis.error_reply("ERR dueq bad-args delete_queue: expected 33 keys and the queue's name")
end
local scheduled = (tonumber(redis.call("HGET", KEYS[6], "scheduled")) or 0) + redis.call("ZCARD", KEYS[2])
local ready = redis.call("ZCARD", KEYS[3])
local running = redis.call("ZCOUNT", KEYS[4], "-inf", "(+inf")
local dead = redis.call("ZCARD", KEYS[5])
-- A partition listed in the schedule holds jobs whatever the count says.
if scheduled == 0 and redis.call("ZCARD", KEYS[1]) > 0 then scheduled = 1 end
if scheduled + ready + running + dead > 0 then
  return {0, scheduled, ready, running, dead}
end
for k = 1, 31 do redis.call("DEL", KEYS[k]) end
redis.call("DEL", KEYS[23] .. ":per_key")  -- the parked jobs' counts per key (lib/keys.lua)
redis.call("DEL", KEYS[25] .. ":finish")  -- the fair flows' finish tags (lib/fair.lua)
-- Every group's members set: each group has a "<group>:kind" field.
for _, field in ipairs(redis.call("HKEYS", KEYS[32])) do
  local group = string.match(field, "^(.*):kind$")
  if group then redis.call("UNLINK", KEYS[32] .. ":m:" .. group) end
end
for _, suffix in ipairs({"", ":of", ":waiting", ":settled"}) do redis.call("UNLINK", KEYS[32] .. suffix) end
redis.call("SREM", KEYS[33], name)
return {1}
