--[[
  extend: move the lease deadline of jobs a live worker reports holding
  ("held"), or of jobs whose handler a worker is about to start ("started":
  the start is also recorded, so that from now on a lost delivery of theirs
  is an attempt: lib/lost_delivery.lua).
  A token that is no longer the job's current one (the job was re-delivered)
  or a job no longer leased changes nothing and is counted.

  KEYS[1]  leased      zset
  KEYS[2]  stats       hash
  KEYS[3]  tokens      hash
  KEYS[4]  started     set   leased ids whose start the broker recorded
  KEYS[5]  unique      hash  unique jobs' holds (lib/unique.lua): a job held
                             "until started" lets its unique key go

  ARGV[1]  new deadline ms
  ARGV[2]  "held" or "started"
  ARGV[3]  N (1..5000)
  ARGV[4+2i], ARGV[5+2i]  id, token

  Returns  array of N integers: 1 extended, 0 stale
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/unique.lua
local deadline = tonumber(ARGV[1])
local what = ARGV[2]
local n = tonumber(ARGV[3])
if not deadline or (what ~= "held" and what ~= "started") or not n or n < 1 or n > 5000 or #ARGV ~= 3 + 2 * n then
  return redis.error_reply("ERR dueq bad-args extend: expected deadline, held or started, N and N id/token pairs")
end
local ids = {}
for i = 0, n - 1 do ids[i + 1] = ARGV[4 + 2 * i] end
-- A job has a token exactly while it is leased (see ack.lua).
local tokens = redis.call("HMGET", KEYS[3], unpack(ids))
local out, args, started = {}, {}, {}
local stale = 0
for i = 1, n do
  if tokens[i] == ARGV[3 + 2 * i] then
    args[#args + 1] = ARGV[1]
    args[#args + 1] = ids[i]
    started[#started + 1] = ids[i]
    out[i] = 1
  else
    stale = stale + 1
    out[i] = 0
  end
end
for i = 1, #args, 2000 do
  redis.call("ZADD", KEYS[1], "XX", unpack(args, i, math.min(i + 1999, #args)))
end
if what == "started" then
  for i = 1, #started, 2000 do
    redis.call("SADD", KEYS[4], unpack(started, i, math.min(i + 1999, #started)))
    unique_release(KEYS[5], {unpack(started, i, math.min(i + 1999, #started))}, "start")
  end
end
if stale > 0 then redis.call("HINCRBY", KEYS[2], "stale_extends", stale) end
return out
