--[[
  ack: mark leased jobs done. Only the current delivery may complete a job:
  an ack whose token is not the job's current token, or for a job that is no
  longer leased, changes nothing and is counted as a stale ack.

  KEYS[1]  leased      zset
  KEYS[2]  stats       hash
  KEYS[3]  job prefix

  ARGV[1]  now ms
  ARGV[2]  retention seconds for the done record (0 = delete it at once)
  ARGV[3]  N (1..5000)
  ARGV[4+2i], ARGV[5+2i]  id, token

  Returns  array of N integers: 1 applied, 0 stale
  Errors   "ERR dueq bad-args <what>"
]]
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
if not now or not retention or retention < 0 or not n or n < 1 or n > 5000 or #ARGV ~= 3 + 2 * n then
  return redis.error_reply("ERR dueq bad-args ack: expected now, retention, N and N id/token pairs")
end
local out = {}
local finished = {}  -- ids for one ZREM at the end
local done, stale = 0, 0
for i = 0, n - 1 do
  local id = ARGV[4 + 2 * i]
  local key = KEYS[3] .. id
  local f = redis.call("HMGET", key, "k", "s")
  if f[1] == ARGV[5 + 2 * i] and f[2] == "leased" then
    finished[#finished + 1] = id
    if retention > 0 then
      redis.call("HSET", key, "s", "done", "f", ARGV[1], "p", "")  -- the payload is not kept
      redis.call("EXPIRE", key, ARGV[2])
    else
      redis.call("DEL", key)
    end
    done = done + 1
    out[i + 1] = 1
  else
    stale = stale + 1
    out[i + 1] = 0
  end
end
for i = 1, #finished, 500 do
  redis.call("ZREM", KEYS[1], unpack(finished, i, math.min(i + 499, #finished)))
end
if done > 0 then redis.call("HINCRBY", KEYS[2], "done", done) end
if stale > 0 then redis.call("HINCRBY", KEYS[2], "stale_acks", stale) end
return out
