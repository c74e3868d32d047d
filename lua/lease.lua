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
  KEYS[4]  tokens      hash  id -> token (16 lowercase hex digits)
  KEYS[5]  attempts    hash  id -> failed attempts (read only)
  KEYS[6]  unconfirmed hash  id -> deliveries that ended unstarted (read
                             only; lib/lost_delivery.lua)

  ARGV[1]  lease deadline ms
  ARGV[2]  count (1..1000)
  ARGV[3]  COUNT tokens of 16 lowercase hex digits each, one string (one
           argument rather than COUNT: a lease of a few jobs out of a
           COUNT of 500 would otherwise send and parse 500 arguments);
           token k goes to the k-th job taken, none is all zeros

  Returns  flat array, 5 values per leased job: id, job record, attempt,
           token, start check: 0 none, 1 after one delivery that ended
           unstarted (its worker announces the start and waits for the
           broker), 2 after more (it also runs while no other announced job
           runs on its worker) (ids whose record was removed meanwhile are
           dropped)
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS and ARGV each take one more value, last: the queue's epoch key
           and the sender's leader epoch (lib/fence.lua); "ERR dueq fenced
           <what>" and nothing written when the sender was deposed
]]
--! include lib/fence.lua
local deadline = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
if not deadline or not count or count < 1 or count > 1000 or #ARGV ~= 3 or #ARGV[3] ~= 16 * count then
  return redis.error_reply("ERR dueq bad-args lease: expected a deadline, a count of 1..1000 and count tokens")
end
-- Only the tokens given to jobs are read, so only they are checked, before
-- anything is written: a lease of a few jobs costs no pass over COUNT tokens.
local function token(k) return string.sub(ARGV[3], 16 * k - 15, 16 * k) end
local function bad_token(k)
  local t = token(k)
  return not string.find(t, "^[0-9a-f]+$") or t == "0000000000000000"
end
-- ZRANGE + ZREMRANGEBYRANK rather than ZPOPMIN: Redis would format every
-- score as text for the reply, which costs more than the rest of the lease.
local ids = redis.call("ZRANGE", KEYS[1], 0, count - 1)
if #ids == 0 then return {} end
local records = redis.call("HMGET", KEYS[3], unpack(ids))
local found = 0
for i = 1, #ids do
  if records[i] then found = found + 1 end
end
for k = 1, found do
  if bad_token(k) then
    return redis.error_reply("ERR dueq bad-args lease: token " .. k .. " is not 16 hex digits or is zero")
  end
end
redis.call("ZREMRANGEBYRANK", KEYS[1], 0, #ids - 1)
if found == 0 then return {} end
local attempts = redis.call("HMGET", KEYS[5], unpack(ids))
local unstarted = redis.call("HMGET", KEYS[6], unpack(ids))
local out, leases, token_args = {}, {}, {}
local taken = 0
for i = 1, #ids do
  if records[i] then
    local id = ids[i]
    taken = taken + 1
    local token_text = token(taken)
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
    out[n + 5] = math.min(tonumber(unstarted[i]) or 0, 2)
  end
end
redis.call("ZADD", KEYS[2], unpack(leases))
redis.call("HSET", KEYS[4], unpack(token_args))
return out
