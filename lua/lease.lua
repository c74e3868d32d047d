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
  KEYS[7]  paused      string present while the queue is paused (`dueq pause`)
  KEYS[8]  rate        hash  the rate limit's bucket: tokens, at (ms)
  KEYS[9..12]  held, running, parked, limits: per-key state (lib/keys.lua)
  KEYS[13] unique      hash  unique jobs' holds (lib/unique.lua): a job held
                             "until first leased" lets its unique key go
  KEYS[14] fair        string the virtual time of fair dispatch (lib/fair.lua),
                             and its flows' finish tags beside it
  KEYS[15] key rates   hash  key -> its own rate limit, jobs per second
                             (`dueq key rate`), over ARGV[11]
  KEYS[16] key tats    zset  key -> when its token bucket is full again (ms,
                             GCRA's theoretical arrival time); a key whose
                             bucket is full has no member
  KEYS[17] key wakes   zset  key -> ms when a job of the key parked for its
                             rate may run: its next token

  ARGV[1]  lease deadline ms
  ARGV[2]  count (1..1000)
  ARGV[3]  COUNT tokens of 16 lowercase hex digits each, one string (one
           argument rather than COUNT: a lease of a few jobs out of a
           COUNT of 500 would otherwise send and parse 500 arguments);
           token k goes to the k-th job taken, none is all zeros
  ARGV[4]  now ms (the rate limit's clock)
  ARGV[5]  concurrency limit: the most jobs leased at once (0 = none)
  ARGV[6]  rate limit, jobs per second (0 = none; decimals allowed)
  ARGV[7]  rate burst: the bucket's size (>= 1)
  ARGV[8]  key limit: the most jobs of one key leased at once, unless the
           limits hash names the key (0 = none)
  ARGV[9]  "1": the queue is ordered: one job of a key at a time, in due
           then id order, and a job waiting for a retry keeps its key's
           turn; "0": not
  ARGV[10] "1": the queue is fair: the ready set is ordered by fair tags
           (lib/fair.lua), and a call that leases sets the virtual time
           going or raises it to the highest tag leased; "0": not (a call
           that leases removes fair state left from an earlier setting)
  ARGV[11] key rate: jobs of one key started per second (decimals allowed;
           0 = none), unless KEYS[15] names the key
  ARGV[12] key rate burst: the most jobs of one key started at once after a
           quiet spell (>= 1)

  Returns  flat array, 5 values per leased job: id, job record, attempt,
           token, start check: 0 none, 1 after one delivery that ended
           unstarted (its worker announces the start and waits for the
           broker), 2 after more (it also runs while no other announced job
           runs on its worker) (ids whose record was removed meanwhile are
           dropped); then 2 values: what held the lease back, and ms to wait:
             0, 0   nothing (fewer jobs than COUNT: the ready set is empty)
             1, 0   the queue is paused: nothing was leased
             2, 0   the concurrency limit: COUNT was cut to the room left
             3, W   the rate limit: COUNT was cut to the bucket's whole
                    tokens; the next token comes in W ms
             4, 1   per-key limits: jobs whose key had no turn free (or no
                    token of its rate) were parked (lib/keys.lua); others
                    may wait behind them
             4, 0   per-key limits: the first ready job is parked, so is
                    every one: nothing runs before a turn is released or a
                    parked job's token comes
           then 1 value: ms until the earliest job parked for its key's
           rate may run (0: none is)
  Errors   "ERR dueq bad-args <what>"; nothing is written then, but for
           what any call of a rate-limited queue does first: full buckets
           forgotten, and the first parked job of each key whose token came
           put back in line
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/encoding_pin.lua
--! include lib/keys.lua
--! include lib/unique.lua
--! include lib/chunked.lua
--! include lib/fair.lua
local deadline = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
if not deadline or not count or count < 1 or count > 1000 or #ARGV ~= 12 or #ARGV[3] ~= 16 * count then
  return redis.error_reply("ERR dueq bad-args lease: expected a deadline, a count of 1..1000, count tokens, now "
    .. "and the limits")
end
local now = tonumber(ARGV[4])
local max_leased = tonumber(ARGV[5])
local rate = tonumber(ARGV[6])
local burst = tonumber(ARGV[7])
if not now or now < 0 or not max_leased or max_leased < 0 or not rate or rate < 0 or rate > 1000000
    or not burst or burst < 1 or burst > 1000000 then
  return redis.error_reply("ERR dueq bad-args lease: now, concurrency limit, rate and burst must be numbers "
    .. "(>= 0, rate <= 1000000, burst >= 1)")
end
local key_default = tonumber(ARGV[8])
local ordered = ARGV[9] == "1"
if not key_default or key_default < 0 or key_default ~= math.floor(key_default) or (ARGV[9] ~= "0" and not ordered)
    or (ARGV[10] ~= "0" and ARGV[10] ~= "1") then
  return redis.error_reply("ERR dueq bad-args lease: the key limit must be an integer >= 0, ordered and fair 0 or 1")
end
local keys = {held = KEYS[9], running = KEYS[10], parked = KEYS[11], ready = KEYS[1]}
local has_own_limits = redis.call("EXISTS", KEYS[12]) == 1
local fair = ARGV[10] == "1"
local key_rate, key_burst = tonumber(ARGV[11]), tonumber(ARGV[12])
if not key_rate or key_rate < 0 or key_rate > 1000000 or not key_burst or key_burst < 1 or key_burst > 1000000
    or key_burst ~= math.floor(key_burst) then
  return redis.error_reply("ERR dueq bad-args lease: the key rate must be 0..1000000 and its burst 1..1000000")
end
local rates = {own = KEYS[15], tats = KEYS[16], wakes = KEYS[17], default = key_rate, burst = key_burst}
local rated = key_rate > 0 or redis.call("EXISTS", KEYS[15]) == 1
-- A fair queue takes the path that reads scores: they are its tags.
local keyed = ordered or key_default > 0 or has_own_limits or fair or rated
-- The trailer of every answer: ms until the first job parked for its key's
-- rate may run.
local function held(code, ms)
  return {code, ms, rated and key_wake_in(rates, now) or 0}
end
if redis.call("EXISTS", KEYS[7]) == 1 then return held(1, 0) end
local held_by, wait_ms = 0, 0
if max_leased > 0 then
  local room = max_leased - count_leases(KEYS[2])
  if room <= 0 then return held(2, 0) end
  if room < count then count, held_by = room, 2 end
end
-- Token bucket: refilled at `rate` per second up to `burst`, one token per
-- job leased; read and written only for a rate-limited queue.
local tokens
if rate > 0 then
  local bucket = redis.call("HMGET", KEYS[8], "tokens", "at")
  tokens = tonumber(bucket[1]) or burst
  local at = tonumber(bucket[2]) or now
  if now > at then tokens = math.min(burst, tokens + (now - at) * rate / 1000) end
  tokens = math.min(tokens, burst)
  if tokens < 1 then
    redis.call("HSET", KEYS[8], "tokens", tostring(tokens), "at", now)
    return held(3, math.ceil((1 - tokens) * 1000 / rate))
  end
  if math.floor(tokens) < count then
    count, held_by = math.floor(tokens), 3
    wait_ms = math.ceil((1 - (tokens - count)) * 1000 / rate)
  end
end
-- Only the tokens given to jobs are read, so only they are checked, before
-- anything is written: a lease of a few jobs costs no pass over COUNT tokens.
local function token(k) return string.sub(ARGV[3], 16 * k - 15, 16 * k) end
local function bad_token(k)
  local t = token(k)
  return not string.find(t, "^[0-9a-f]+$") or t == "0000000000000000"
end
-- A keyed queue's candidates (lib/keys.lua): the ready jobs before the first
-- parked one; those whose key has a turn free take it, the others are
-- parked. Reads first, then checks the tokens the jobs to lease will take,
-- then writes, each in one call per key hash.
local function take_turns(entries)
  local ids, dues, keys_of = {}, {}, {}
  for i = 1, #entries, 2 do
    local score = tonumber(entries[i + 1])
    if score >= key_parked_offset then break end
    ids[#ids + 1], dues[#ids + 1] = entries[i], score
  end
  if #ids == 0 then return nil end
  local records = redis.call("HMGET", KEYS[3], unpack(ids))
  local held = redis.call("HMGET", keys.held, unpack(ids))
  local distinct, n_distinct = {}, 0
  for i = 1, #ids do
    local key = records[i] and not held[i] and record_key(records[i])
    keys_of[i] = key or nil
    if key and not distinct[key] then
      n_distinct = n_distinct + 1
      distinct[key], distinct[n_distinct] = n_distinct, key
    end
  end
  local running, limits, buckets = {}, {}, nil
  if n_distinct > 0 then
    local listed = {unpack(distinct, 1, n_distinct)}
    local counts = redis.call("HMGET", keys.running, unpack(listed))
    local own = has_own_limits and redis.call("HMGET", KEYS[12], unpack(listed)) or {}
    for j = 1, n_distinct do
      running[listed[j]] = tonumber(counts[j]) or 0
      limits[listed[j]] = ordered and 1 or tonumber(own[j]) or key_default
    end
    if rated then buckets = key_buckets(rates, listed) end
  end
  local lease_ids, lease_records, parked = {}, {}, {}
  local highest = nil  -- the highest score leased: a fair queue's virtual time follows it
  local new_held, changed = {}, {}
  local mark = ordered and "o" or "l"
  for i = 1, #ids do
    local key = keys_of[i]
    -- A job runs when its key has a turn free and then a token (taken only
    -- by a job that runs).
    if (key and limits[key] > 0 and running[key] >= limits[key]) or (buckets and key and not key_token(buckets, key, now)) then
      parked[#parked + 1] = i
    else
      if key and limits[key] > 0 then
        running[key] = running[key] + 1
        changed[key] = true
        new_held[#new_held + 1], new_held[#new_held + 2] = ids[i], mark .. key
      end
      local n = #lease_ids + 1
      lease_ids[n], lease_records[n] = ids[i], records[i]
      if not highest or dues[i] > highest then highest = dues[i] end
    end
  end
  local found = 0
  for i = 1, #lease_ids do if lease_records[i] then found = found + 1 end end
  for k = 1, found do
    if bad_token(k) then
      return redis.error_reply("ERR dueq bad-args lease: token " .. k .. " is not 16 hex digits or is zero")
    end
  end
  if buckets then key_buckets_write(rates, keys, buckets, now) end
  if #new_held > 0 then
    redis.call("HSET", keys.held, unpack(new_held))
    local counts = {}
    for key in pairs(changed) do counts[#counts + 1], counts[#counts + 2] = key, running[key] end
    redis.call("HSET", keys.running, unpack(counts))
  end
  if #parked > 0 then
    local rescored, members = {}, {}
    for _, i in ipairs(parked) do
      rescored[#rescored + 1], rescored[#rescored + 2] = string.format("%d", dues[i] + key_parked_offset), ids[i]
      members[#members + 1], members[#members + 2] = 0, key_member(keys_of[i], dues[i], ids[i])
    end
    redis.call("ZADD", KEYS[1], "XX", unpack(rescored))
    local added = redis.call("ZADD", keys.parked, unpack(members))
    local per_key = {}
    for _, i in ipairs(parked) do per_key[keys_of[i]] = (per_key[keys_of[i]] or 0) + 1 end
    for key, n in pairs(per_key) do
      if added == #parked then
        redis.call("ZINCRBY", key_per_key(keys.parked), n, key)
      else
        -- A member was there already (a job cancelled while parked, enqueued
        -- again since with the same due time): each key's count is read
        -- whole instead. Rare, and bounded by the keys of this call.
        local prefix = key_prefix(key)
        redis.call("ZADD", key_per_key(keys.parked),
          redis.call("ZLEXCOUNT", keys.parked, "[" .. prefix, "(" .. prefix .. ":"), key)
      end
    end
  end
  return {ids = lease_ids, records = lease_records, parked = #parked > 0, highest = highest}
end

local ids, records, highest
local parked_some = false
if rated then key_rate_wake(rates, keys, now) end
if keyed then
  local entries = redis.call("ZRANGE", KEYS[1], 0, count - 1, "WITHSCORES")
  if #entries == 0 then return held(0, 0) end
  local taken_turns = take_turns(entries)
  if taken_turns == nil then return held(4, 0) end  -- the first ready job is parked: so is every one
  if taken_turns.err then return taken_turns end
  ids, records, parked_some, highest = taken_turns.ids, taken_turns.records, taken_turns.parked, taken_turns.highest
  if #ids == 0 then return held(4, 1) end
else
  -- ZRANGE + ZREMRANGEBYRANK rather than ZPOPMIN: Redis would format every
  -- score as text for the reply, which costs more than the rest of the lease.
  ids = redis.call("ZRANGE", KEYS[1], 0, count - 1)
  if #ids == 0 then return held(0, 0) end
  records = redis.call("HMGET", KEYS[3], unpack(ids))
end
local found = 0
for i = 1, #ids do
  if records[i] then found = found + 1 end
end
for k = 1, found do
  if bad_token(k) then
    return redis.error_reply("ERR dueq bad-args lease: token " .. k .. " is not 16 hex digits or is zero")
  end
end
if keyed then redis.call("ZREM", KEYS[1], unpack(ids)) else redis.call("ZREMRANGEBYRANK", KEYS[1], 0, #ids - 1) end
if found == 0 then return parked_some and held(4, 1) or held(0, 0) end
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
unique_release(KEYS[13], ids, "lease")
if fair_set(KEYS[14], fair, now) then fair_advance(KEYS[14], highest, KEYS[1]) end
if rate > 0 then redis.call("HSET", KEYS[8], "tokens", tostring(tokens - taken), "at", now) end
if #ids < count then held_by, wait_ms = 0, 0 end  -- the ready set ran out before any limit
if parked_some and held_by == 0 then held_by, wait_ms = 4, 1 end
out[#out + 1] = held_by
out[#out + 1] = wait_ms
out[#out + 1] = rated and key_wake_in(rates, now) or 0
return out
