--[[
  cron_retire: end one periodic entry's ticks in one queue (`dueq cron
  remove`, or `dueq cron add` replacing it). The entry's state keeps its
  last tick and takes the fingerprint "retired", so that a cron_tick.lua
  call still on its way for the old definition writes nothing; the caller
  then cancels the ticks enqueued ahead (up to the returned last tick).

  KEYS[1]  cron  hash  entry name -> "<last tick ms>:<fingerprint>"

  ARGV[1]  entry name

  Returns  the last tick enqueued ms (0: none)
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
if #ARGV ~= 1 or ARGV[1] == "" then return redis.error_reply("ERR dueq bad-args cron_retire: expected an entry name") end
local state = redis.call("HGET", KEYS[1], ARGV[1])
if not state then return 0 end
local last = tonumber(string.match(state, "^(%d+):")) or 0
redis.call("HSET", KEYS[1], ARGV[1], string.format("%d", last) .. ":retired")
return last
