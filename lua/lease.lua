--[[
  lease: take up to COUNT ready jobs for delivery. Each gets a new fencing
  token, one of the COUNT the broker drew at random (64 bits each: neither
  guessable from other tokens nor repeated after Redis lost writes it had
  acknowledged, as a counter kept here would be), and a lease that ends at
  DEADLINE unless the broker extends it. The attempt
  number is the failed attempts so far plus one; it is not written here:
  every delivery that ends without an ack goes through nack or reclaim,
  which count it (so the common path writes nothing per attempt).

  KEYS[1]  ready       zset  id -> due ms (earliest due is leased first)
  KEYS[2]  leased      zset  id -> lease deadline ms
  KEYS[3]  jobs        hash  id -> job record
  KEYS[4]  tokens      hash  id -> token
  KEYS[5]  attempts    hash  id -> failed attempts (read only)

  ARGV[1]  lease deadline ms
  ARGV[2]  count (1..1000)
  ARGV[3..2+count]  tokens: decimal, 1..2^64-1, in the order jobs are taken

  Returns  flat array, 4 values per leased job: id, job record, attempt,
           token (ids whose record was removed meanwhile are dropped)
  Errors   "ERR dueq bad-args <what>"
]]
local deadline = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
if not deadline or not count or count < 1 or count > 1000 or #ARGV ~= 2 + count then
  return redis.error_reply("ERR dueq bad-args lease: expected a deadline, a count of 1..1000 and count tokens")
end
for i = 3, #ARGV do
  local t = ARGV[i]
  if #t > 20 or not string.find(t, "^[1-9]%d*$") then
    return redis.error_reply("ERR dueq bad-args lease: token " .. (i - 2) .. " is not a positive decimal integer")
  end
end
-- ZRANGE + ZREMRANGEBYRANK rather than ZPOPMIN: Redis would format every
-- score as text for the reply, which costs more than the rest of the lease.
local ids = redis.call("ZRANGE", KEYS[1], 0, count - 1)
if #ids == 0 then return {} end
redis.call("ZREMRANGEBYRANK", KEYS[1], 0, #ids - 1)
local records = redis.call("HMGET", KEYS[3], unpack(ids))
local attempts = redis.call("HMGET", KEYS[5], unpack(ids))
local found = 0
for i = 1, #ids do
  if records[i] then found = found + 1 end
end
if found == 0 then return {} end
local out, leases, token_args = {}, {}, {}
local taken = 0
for i = 1, #ids do
  if records[i] then
    local id = ids[i]
    taken = taken + 1
    local token_text = ARGV[2 + taken]
    local attempt = 1
    if attempts[i] then attempt = tonumber(attempts[i]) + 1 end
    leases[#leases + 1] = ARGV[1]
    leases[#leases + 1] = id
    token_args[#token_args + 1] = id
    token_args[#token_args + 1] = token_text
    local n = #out
    out[n + 1] = id
    out[n + 2] = records[i]
    out[n + 3] = attempt
    out[n + 4] = token_text
  end
end
redis.call("ZADD", KEYS[2], unpack(leases))
redis.call("HSET", KEYS[4], unpack(token_args))
return out
