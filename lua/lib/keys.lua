-- Per-key limits (docs/keys.md), included (by embed.cmake) in every script
-- that leases a job or ends a lease. A queue with a key limit runs at most
-- LIMIT jobs of one key at a time; an ordered queue runs one, and a job
-- that goes back to wait for a retry keeps its key's turn.
--
-- State, all of it in the queue's slot:
--   held     hash  id -> "o" or "l", then its key: the jobs that hold a
--                  turn of their key (leased, or with "o", of an ordered
--                  queue, also while it waits for a retry)
--   running  hash  key -> turns held; a key without any has no field, so
--                  an idle key costs nothing
--   parked   zset  every score 0, members key_member(key, due, id): ready
--                  jobs whose key had no turn free, in key, then due, then
--                  id order (ZRANGEBYLEX finds a key's first)
--   limits   hash  key -> its own limit (`dueq key limit`), over the
--                  queue's default
--   parked..":per_key"  zset  key -> its members in parked: how many jobs
--                  wait for a turn of each key, for the top keys of the
--                  stats and metrics; a key with none has no member
-- A parked job stays in the ready set, with key_parked_offset added to its
-- score: it sorts behind every job that can run, every view of the ready
-- set still counts it, and cancelling or purging it needs nothing here (its
-- parked member is dropped when it comes up, key_unpark).

-- 2^52 ms: above any due time (year 142,000), and a due time plus it is
-- still exact in a double.
local key_parked_offset = 4503599627370496

-- The key of a job record (broker/store/job_record.hpp): versions 3, 4 (a
-- start-by deadline) and 5 (a trace context; in both the key may be empty)
-- carry it right after the type. nil for a job without one.
local function record_key(record)
  if not record then return nil end
  local head, version, b = string.byte(record, 1, 3)
  if not ((head == 0x9a and version == 3) or (head == 0x9b and version == 4) or (head == 0x9d and version == 5)) or not b then
    return nil
  end
  local at  -- where the key's str header starts: after the type
  if b >= 0xa0 and b <= 0xbf then
    at = 4 + b - 0xa0
  elseif b == 0xd9 then
    at = 5 + string.byte(record, 4)
  else
    return nil  -- types are at most 128 bytes: fixstr or str8
  end
  local k = string.byte(record, at)
  if not k or k == 0xa0 then return nil end
  if k >= 0xa0 and k <= 0xbf then return string.sub(record, at + 1, at + k - 0xa0) end
  if k == 0xd9 then
    local len = string.byte(record, at + 1) or 0
    return string.sub(record, at + 2, at + 1 + len)
  end
  return nil  -- keys are at most 128 bytes
end

-- A parked job's member: its key length-prefixed (so that no key is a
-- prefix of another's members), its due ms in 16 digits, then its id.
local function key_prefix(key)
  return string.format("%03d", #key) .. key
end
local function key_member(key, due, id)
  return key_prefix(key) .. string.format("%016d", due) .. id
end

-- The key -> parked members zset beside PARKED (same slot).
local function key_per_key(parked)
  return parked .. ":per_key"
end

-- The turns KEY may hold: its own limit, else the queue's default.
local function key_limit_of(limits_key, key, default_limit)
  return tonumber(redis.call("HGET", limits_key, key)) or default_limit
end

-- Moves KEY's first parked job back into line in the ready set; false when
-- the key has none. Members of jobs no longer parked (cancelled, purged,
-- leased through a repair) are dropped on the way, at most 16 per call.
local function key_unpark(k, key)
  local prefix = key_prefix(key)
  for _ = 1, 16 do
    local first = redis.call("ZRANGEBYLEX", k.parked, "[" .. prefix, "(" .. prefix .. ":", "LIMIT", 0, 1)[1]
    if not first then return false end
    redis.call("ZREM", k.parked, first)
    if tonumber(redis.call("ZINCRBY", key_per_key(k.parked), -1, key)) <= 0 then
      redis.call("ZREM", key_per_key(k.parked), key)
    end
    local id = string.sub(first, #prefix + 17)
    local score = tonumber(redis.call("ZSCORE", k.ready, id))
    if score and score >= key_parked_offset then
      redis.call("ZADD", k.ready, "XX", string.format("%d", score - key_parked_offset), id)
      return true
    end
  end
  return true
end

-- Ends ID's turn of its key, if it holds one, and lets the key's next
-- parked job run. K: {held, running, parked, ready} key names. WAITS_AGAIN:
-- the job goes back to wait (a retry, a delivery that ended unstarted),
-- and an ordered queue's job keeps its turn then.
local function key_release(k, id, waits_again)
  local held = redis.call("HGET", k.held, id)
  if not held or (waits_again and string.byte(held) == 111) then return end  -- 111: "o"
  local key = string.sub(held, 2)
  redis.call("HDEL", k.held, id)
  if redis.call("HINCRBY", k.running, key, -1) <= 0 then redis.call("HDEL", k.running, key) end
  key_unpark(k, key)
end

-- key_release of IDS, all finished, in one call per hash: one EXISTS for a
-- queue without keys.
local function key_release_all(k, ids)
  if #ids == 0 or redis.call("EXISTS", k.held) == 0 then return end
  local held = redis.call("HMGET", k.held, unpack(ids))
  local gone, released, keys_list = {}, {}, {}
  for i = 1, #ids do
    if held[i] then
      gone[#gone + 1] = ids[i]
      local key = string.sub(held[i], 2)
      if not released[key] then
        released[key] = 0
        keys_list[#keys_list + 1] = key
      end
      released[key] = released[key] + 1
    end
  end
  if #gone == 0 then return end
  redis.call("HDEL", k.held, unpack(gone))
  local counts = redis.call("HMGET", k.running, unpack(keys_list))
  local left, idle = {}, {}
  for j, key in ipairs(keys_list) do
    local n = (tonumber(counts[j]) or 0) - released[key]
    if n > 0 then left[#left + 1], left[#left + 2] = key, n else idle[#idle + 1] = key end
  end
  if #left > 0 then redis.call("HSET", k.running, unpack(left)) end
  if #idle > 0 then redis.call("HDEL", k.running, unpack(idle)) end
  if redis.call("EXISTS", k.parked) == 0 then return end
  for _, key in ipairs(keys_list) do
    for _ = 1, released[key] do
      if not key_unpark(k, key) then break end
    end
  end
end

-- Per-key rate limits (lease.lua), GCRA: R = {own, tats, wakes, default,
-- burst}. A key's bucket is its theoretical arrival time, TAT: a job of the
-- key may start at NOW when TAT - NOW <= (burst - 1) * interval (interval =
-- 1000 / rate ms), and TAT then grows by the interval. A key whose TAT has
-- passed has a full bucket and no member in R.tats: an idle key costs
-- nothing. A job parked for its key's rate waits in R.wakes for the key's
-- next token (the lease that comes then puts it back in line).

-- The buckets of the rate-limited keys among LISTED.
local function key_buckets(r, listed)
  local own = redis.call("EXISTS", r.own) == 1 and redis.call("HMGET", r.own, unpack(listed)) or {}
  local tats = redis.call("ZMSCORE", r.tats, unpack(listed))
  local per_key = {}
  for j, key in ipairs(listed) do
    local rate = tonumber(own[j]) or r.default
    if rate > 0 then per_key[key] = {interval = 1000 / rate, tat = tonumber(tats[j]), took = false} end
  end
  return {per_key = per_key, burst = r.burst}
end

-- Takes a token of KEY's bucket at NOW: false (and the time its next token
-- comes, kept for the write) when it has none.
local function key_token(buckets, key, now)
  local b = buckets.per_key[key]
  if not b then return true end
  local tat = math.max(b.tat or now, now)
  local tolerance = (buckets.burst - 1) * b.interval
  if tat - now > tolerance then
    b.wake = tat - tolerance
    return false
  end
  b.tat, b.took = tat + b.interval, true
  return true
end

-- Writes the buckets that gave tokens, and the wakes: of a key parked for
-- its rate, and of a key that gave a token while jobs of it stay parked.
local function key_buckets_write(r, k, buckets, now)
  local tats, wakes = {}, {}
  for key, b in pairs(buckets.per_key) do
    local next_token = b.tat and (b.tat - (buckets.burst - 1) * b.interval)
    if b.took then
      tats[#tats + 1], tats[#tats + 2] = string.format("%.3f", b.tat), key
      if not b.wake and redis.call("ZSCORE", key_per_key(k.parked), key) then b.wake = math.max(now, next_token) end
    end
    if b.wake then wakes[#wakes + 1], wakes[#wakes + 2] = string.format("%.3f", b.wake), key end
  end
  if #tats > 0 then redis.call("ZADD", r.tats, unpack(tats)) end
  if #wakes > 0 then redis.call("ZADD", r.wakes, "LT", unpack(wakes)) end
end

-- Forgets full buckets, and puts back in line the first parked job of each
-- key whose next token has come (at most 64 keys per call).
local function key_rate_wake(r, k, now)
  local at = string.format("%d", now)
  redis.call("ZREMRANGEBYSCORE", r.tats, "-inf", at)
  local due = redis.call("ZRANGEBYSCORE", r.wakes, "-inf", at, "LIMIT", 0, 64)
  if #due == 0 then return end
  redis.call("ZREM", r.wakes, unpack(due))
  for _, key in ipairs(due) do key_unpark(k, key) end
end

-- Ms until the first job parked for its key's rate may run; 0: none waits.
local function key_wake_in(r, now)
  local first = redis.call("ZRANGE", r.wakes, 0, 0, "WITHSCORES")
  if not first[2] then return 0 end
  return math.max(1, math.ceil(tonumber(first[2]) - now))
end
