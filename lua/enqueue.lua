--[[
  enqueue: store a batch of new jobs of one queue.

  A job whose id the queue already knows (scheduled, ready, leased, dead, or
  done/cancelled within the retention period) is not written again: a
  producer that retries an enqueue never makes a second job.

  KEYS[1]  scheduled   zset  id -> due ms
  KEYS[2]  ready       zset  id -> due ms, jobs due now
  KEYS[3]  leased      zset
  KEYS[4]  stats       hash  counters
  KEYS[5]  jobs        hash  id -> job record
  KEYS[6]  done        zset  id -> finished ms
  KEYS[7]  cancelled   zset  id -> finished ms

  ARGV[1]  now ms
  ARGV[2]  max backlog: when ready + leased jobs reach it the whole batch is
           refused (0 = no limit)
  ARGV[3]  N, number of jobs (1..1000)
  ARGV[4+3i .. 6+3i] for job i: id, due ms (>= 0), job record (a msgpack
           array of 8 starting with version 1, see broker/job_record.hpp)

  Returns  array of N integers: 1 accepted, 0 duplicate, 2 refused (backlog)
  Errors   "ERR dueq bad-args <what>"; nothing is written then
]]
local now = tonumber(ARGV[1])
local max_backlog = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
if not now or not max_backlog or max_backlog < 0 or not n or n < 1 or n > 1000 or #ARGV ~= 3 + 3 * n then
  return redis.error_reply("ERR dueq bad-args enqueue: expected now, max_backlog, N and 3 values per job")
end
local ids = {}
for i = 0, n - 1 do
  local b = 4 + 3 * i
  local due = tonumber(ARGV[b + 1])
  local record = ARGV[b + 2]
  -- 0x98 = msgpack fixarray of 8, then the record version 1.
  if ARGV[b] == "" or not due or due < 0 or string.byte(record, 1) ~= 0x98 or string.byte(record, 2) ~= 1 then
    return redis.error_reply("ERR dueq bad-args enqueue: job " .. i .. " has an empty id, a bad due or a bad record")
  end
  ids[i + 1] = ARGV[b]
end

local out = {}
if max_backlog > 0 and redis.call("ZCARD", KEYS[2]) + redis.call("ZCARD", KEYS[3]) >= max_backlog then
  for i = 1, n do out[i] = 2 end
  return out
end
-- Three variadic reads find every duplicate of the batch.
local live = redis.call("HMGET", KEYS[5], unpack(ids))
local done = redis.call("ZMSCORE", KEYS[6], unpack(ids))
local cancelled = redis.call("ZMSCORE", KEYS[7], unpack(ids))
local seen = {}
local records, ready, scheduled = {}, {}, {}
for i = 1, n do
  local id = ids[i]
  if live[i] or done[i] or cancelled[i] or seen[id] then
    out[i] = 0
  else
    seen[id] = true
    local b = 1 + 3 * i
    records[#records + 1] = id
    records[#records + 1] = ARGV[b + 2]
    -- Scores are written from their ARGV strings: formatting a Lua number
    -- back into a string costs more than the rest of the write.
    local target = scheduled
    if tonumber(ARGV[b + 1]) <= now then target = ready end
    target[#target + 1] = ARGV[b + 1]
    target[#target + 1] = id
    out[i] = 1
  end
end
if #records > 0 then
  redis.call("HSET", KEYS[5], unpack(records))
  if #ready > 0 then redis.call("ZADD", KEYS[2], unpack(ready)) end
  if #scheduled > 0 then redis.call("ZADD", KEYS[1], unpack(scheduled)) end
  redis.call("HINCRBY", KEYS[4], "accepted", #records / 2)
end
return out
