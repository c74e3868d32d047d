--[[
  ack: mark leased jobs done. Only the current delivery may complete a job:
  an ack whose token is not the job's current token, or for a job that is no
  longer leased, changes nothing and is counted as a stale ack. A done job's
  data is deleted; its id stays in the done set for the retention period so
  that `dueq job` can report it and a producer's retry is still a duplicate.

  KEYS[1]  leased            zset
  KEYS[2]  stats             hash
  KEYS[3]  jobs              hash
  KEYS[4]  tokens            hash
  KEYS[5]  attempts          hash
  KEYS[6]  errors            hash
  KEYS[7]  error logs        hash
  KEYS[8]  cancel requested  set
  KEYS[9]  done              zset  id -> finished ms
  KEYS[10] started           set   leased ids whose start the broker recorded
  KEYS[11] unconfirmed       hash  id -> deliveries that ended unstarted

  ARGV[1]  now ms
  ARGV[2]  retention seconds for the done entry (0 = keep none)
  ARGV[3]  N (1..5000)
  ARGV[4+2i], ARGV[5+2i]  id, token

  Returns  array of N integers: 1 applied, 0 stale
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
if not now or not retention or retention < 0 or not n or n < 1 or n > 5000 or #ARGV ~= 3 + 2 * n then
  return redis.error_reply("ERR dueq bad-args ack: expected now, retention, N and N id/token pairs")
end
local ids = {}
for i = 0, n - 1 do ids[i + 1] = ARGV[4 + 2 * i] end
-- A job has a token exactly while it is leased (every script that ends a
-- lease deletes it), so the token alone proves the lease.
local tokens = redis.call("HMGET", KEYS[4], unpack(ids))
-- Appended through a counter: Lua 5.1's # is a search, and this runs per job.
local out, finished, seen, done = {}, {}, {}, 0
for i = 1, n do
  local id = ids[i]
  if tokens[i] == ARGV[3 + 2 * i] and not seen[id] then
    seen[id] = true
    done = done + 1
    finished[done] = id
    out[i] = 1
  else
    out[i] = 0
  end
end
if done > 0 then
  redis.call("ZREM", KEYS[1], unpack(finished))
  redis.call("HDEL", KEYS[3], unpack(finished))
  redis.call("HDEL", KEYS[4], unpack(finished))
  -- Most jobs never failed, were never cancelled and finished before a
  -- heartbeat listed them, so these keys are often absent: an EXISTS spares
  -- Redis turning every id into an argument for nothing.
  for _, k in ipairs({5, 6, 7, 11}) do
    if redis.call("EXISTS", KEYS[k]) == 1 then redis.call("HDEL", KEYS[k], unpack(finished)) end
  end
  for _, k in ipairs({8, 10}) do
    if redis.call("EXISTS", KEYS[k]) == 1 then redis.call("SREM", KEYS[k], unpack(finished)) end
  end
  if retention > 0 then
    for i = 1, done, 1000 do
      local args, k = {}, 0
      for j = i, math.min(i + 999, done) do
        args[k + 1], args[k + 2] = ARGV[1], finished[j]
        k = k + 2
      end
      redis.call("ZADD", KEYS[9], unpack(args))
    end
  end
  redis.call("HINCRBY", KEYS[2], "done", done)
end
if done < n then redis.call("HINCRBY", KEYS[2], "stale_acks", n - done) end
return out
