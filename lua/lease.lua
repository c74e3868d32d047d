--[[
  lease: take up to COUNT ready jobs for delivery. Each gets a new fencing
  token and one more attempt, and a lease that ends at DEADLINE unless the
  broker extends it.

  KEYS[1]  ready       zset  id -> due ms (earliest due is leased first)
  KEYS[2]  leased      zset  id -> lease deadline ms
  KEYS[3]  job prefix

  ARGV[1]  lease deadline ms
  ARGV[2]  count (1..1000)

  Returns  flat array, 8 values per leased job:
           id, type, payload, due ms, attempt, max attempts, token, created ms
           (ids whose record was removed meanwhile are skipped)
  Errors   "ERR dueq bad-args <what>"
]]
local deadline = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
if not deadline or not count or count < 1 or count > 1000 then
  return redis.error_reply("ERR dueq bad-args lease: expected a deadline and a count of 1..1000")
end
local popped = redis.call("ZPOPMIN", KEYS[1], count)
local ids = {}
for j = 1, #popped, 2 do ids[#ids + 1] = popped[j] end
local out = {}
local leases = {}  -- score, id pairs for one ZADD: a call per job costs more than the work
for _, id in ipairs(ids) do
  local key = KEYS[3] .. id
  local f = redis.call("HMGET", key, "s", "t", "p", "d", "m", "c", "k", "a")
  if f[1] == "ready" then
    -- One write for token, attempt and state (cheaper than three).
    local token = tonumber(f[7]) + 1
    local attempt = tonumber(f[8]) + 1
    redis.call("HSET", key, "s", "leased", "k", token, "a", attempt)
    leases[#leases + 1] = ARGV[1]
    leases[#leases + 1] = id
    local n = #out
    out[n + 1] = id
    out[n + 2] = f[2]
    out[n + 3] = f[3]
    out[n + 4] = f[4]
    out[n + 5] = attempt
    out[n + 6] = f[5]
    out[n + 7] = token
    out[n + 8] = f[6]
  end
end
if #leases > 0 then redis.call("ZADD", KEYS[2], unpack(leases)) end
return out
