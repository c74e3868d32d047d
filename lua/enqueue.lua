--[[
  enqueue: store a batch of new jobs of one queue.

  A job whose id already exists in the queue (in any state, including "done"
  while its record is retained) is not written again: a producer that
  retries an enqueue never makes a second job.

  KEYS[1]  scheduled   zset  id -> due ms
  KEYS[2]  ready       zset  id -> due ms, jobs due now
  KEYS[3]  stats       hash  counters
  KEYS[4]  job prefix  string prefix of job hashes ("dueq:{q}:j:")
  KEYS[5]  leased      zset

  ARGV[1]  now ms
  ARGV[2]  default max attempts (>= 1)
  ARGV[3]  max backlog: when ready + leased jobs reach it the whole batch is
           refused (0 = no limit)
  ARGV[4]  N, number of jobs (1..1000)
  ARGV[5+7i .. 11+7i] for job i: id, type, payload, due ms (0 = now),
           max attempts (0 = default), backoff base ms and backoff cap ms
           (0 = the queue's, given to nack)

  Returns  array of N integers: 1 accepted, 0 duplicate, 2 refused (backlog)
  Errors   "ERR dueq bad-args <what>"; nothing is written then
]]
local now = tonumber(ARGV[1])
local default_max = tonumber(ARGV[2])
local max_backlog = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
if not now or not default_max or default_max < 1 or not max_backlog or max_backlog < 0 or not n or n < 1
    or n > 1000 or #ARGV ~= 4 + 7 * n then
  return redis.error_reply("ERR dueq bad-args enqueue: expected now, default_max, max_backlog, N and 7 values per job")
end
for i = 0, n - 1 do
  local b = 5 + 7 * i
  local due = tonumber(ARGV[b + 3])
  local max = tonumber(ARGV[b + 4])
  local base = tonumber(ARGV[b + 5])
  local cap = tonumber(ARGV[b + 6])
  if ARGV[b] == "" or ARGV[b + 1] == "" or not due or due < 0 or not max or max < 0 or not base or base < 0
      or not cap or cap < 0 then
    return redis.error_reply("ERR dueq bad-args enqueue: job " .. i .. " has an empty id/type or a bad due/max/backoff")
  end
end

local out = {}
if max_backlog > 0 and redis.call("ZCARD", KEYS[2]) + redis.call("ZCARD", KEYS[5]) >= max_backlog then
  for i = 1, n do out[i] = 2 end
  return out
end
local accepted = 0
for i = 0, n - 1 do
  local b = 5 + 7 * i
  local id = ARGV[b]
  local key = KEYS[4] .. id
  if redis.call("EXISTS", key) == 1 then
    out[i + 1] = 0
  else
    -- Numbers are written from their ARGV strings: formatting a Lua number
    -- back into a string costs more than the rest of the write.
    local due = ARGV[b + 3]
    if tonumber(due) == 0 then due = ARGV[1] end
    local max = ARGV[b + 4]
    if tonumber(max) == 0 then max = ARGV[2] end
    local state
    if tonumber(due) <= now then
      redis.call("ZADD", KEYS[2], due, id)
      state = "ready"
    else
      redis.call("ZADD", KEYS[1], due, id)
      state = "scheduled"
    end
    redis.call("HSET", key, "t", ARGV[b + 1], "p", ARGV[b + 2], "d", due, "a", "0", "m", max, "k", "0",
      "c", ARGV[1], "s", state)
    -- Per-job backoff is stored only when given, to keep records small.
    if ARGV[b + 5] ~= "0" then redis.call("HSET", key, "bb", ARGV[b + 5]) end
    if ARGV[b + 6] ~= "0" then redis.call("HSET", key, "bc", ARGV[b + 6]) end
    accepted = accepted + 1
    out[i + 1] = 1
  end
end
if accepted > 0 then redis.call("HINCRBY", KEYS[3], "accepted", accepted) end
return out
