--[[
  cron_restart: give one periodic entry a fresh state in its queue, for a
  definition just added or replaced by `dueq cron add` (after cron_retire.lua
  ended the old one's ticks). Its ticks start after now; the ticks the old
  definition had enqueued ahead were cancelled, and their ids (the same
  NAME@<tick> a new tick at that time gets) are freed here, so that the new
  definition's ticks in that window run instead of being passed over as
  known ids. A tick that already ran (done) keeps its id: it is not run again.

  KEYS[1]  cron       hash  entry name -> "<last tick ms>:<fingerprint>"
  KEYS[2]  cancelled  zset  id -> finished ms

  ARGV[1]  entry name
  ARGV[2]  fingerprint of the new definition (16 hex digits)
  ARGV[3..] the new definition's tick ids within the lookahead (0..1000),
           each NAME@<tick in UTC>; those in the cancelled set are removed from
           it (the counters keep them: the law of audit.lua still holds)

  Returns  the number of tick ids freed
  Errors   "ERR dueq bad-args <what>"; nothing is written then
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
local name, fingerprint = ARGV[1], ARGV[2]
if #ARGV < 2 or #ARGV > 1002 or name == "" or not string.match(fingerprint or "", "^%x+$") or #fingerprint ~= 16 then
  return redis.error_reply("ERR dueq bad-args cron_restart: expected an entry name, a fingerprint of 16 hex digits and at most 1000 tick ids")
end
local prefix = name .. "@"
for i = 3, #ARGV do
  if string.sub(ARGV[i], 1, #prefix) ~= prefix or #ARGV[i] == #prefix or #ARGV[i] > 200 then
    return redis.error_reply("ERR dueq bad-args cron_restart: tick id " .. (i - 2) .. " is not " .. prefix .. "<tick>")
  end
end
redis.call("HSET", KEYS[1], name, "0:" .. fingerprint)
local freed = 0
for i = 3, #ARGV do freed = freed + redis.call("ZREM", KEYS[2], ARGV[i]) end
return freed
