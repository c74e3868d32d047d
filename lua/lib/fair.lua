-- Fair dispatch between keys (docs/keys.md), included by the scripts that
-- put jobs in line (enqueue, promote) and by lease, after lib/chunked.lua. A fair queue orders its
-- ready set by start-time fair queuing tags instead of due times: each key
-- is a flow (jobs without a key are one flow, ""), and a job that comes into
-- line gets the tag
--     S = max(V, F[its key]),   then F[its key] = S + fair_quantum / weight
-- where V, the queue's virtual time, is the highest tag leased so far. A key
-- with a million jobs in line has tags far past V; a key that was idle gets
-- V and goes next. Keys with jobs waiting are leased in proportion to their
-- weights, however slow or fast the workers are (V follows what is leased,
-- not the clock). The tags are whole numbers that start at the time the
-- queue became fair, so a job put in line by its due time (a replay, a
-- reclaimed lease) still finds a sensible place.
--
-- State, in the queue's slot:
--   fair         string  V; present while the queue is fair (the first
--                        call that puts a job in line or leases sets it;
--                        a lease of a queue no longer fair removes it)
--   fair:finish  zset    flow -> F, where its next job starts; a flow with
--                        F <= V has no member (max(V, F) is V then), so an
--                        idle key costs nothing
--   weights      hash    key -> weight 1..1000 (`dueq key weight`; 1 when
--                        absent)

-- A tag step of 1000 / weight, rounded: weights 1..1000 keep shares within
-- 0.1% of their ratio.
local fair_quantum = 1000

local function fair_finish_key(fair)
  return fair .. ":finish"
end

-- Tags (decimal strings, for ZADD) for jobs of a fair queue coming into
-- line in the order of FLOWS (each a key or ""); the virtual time starts at
-- NOW if it had not.
local function fair_tags(fair, weights, flows, now)
  local v = tonumber(redis.call("GET", fair))
  if not v then
    v = now
    redis.call("SET", fair, string.format("%d", now))
  end
  local finish_key = fair_finish_key(fair)
  local at, step, listed = {}, {}, {}
  for i = 1, #flows do
    if not at[flows[i]] then
      at[flows[i]] = true
      listed[#listed + 1] = flows[i]
    end
  end
  local finish = redis.call("ZMSCORE", finish_key, unpack(listed))
  local weight = redis.call("EXISTS", weights) == 1 and redis.call("HMGET", weights, unpack(listed)) or {}
  for j, flow in ipairs(listed) do
    at[flow] = math.max(v, tonumber(finish[j]) or v)
    step[flow] = math.max(1, math.floor(fair_quantum / (tonumber(weight[j]) or 1) + 0.5))
  end
  local tags = {}
  for i = 1, #flows do
    local flow = flows[i]
    tags[i] = string.format("%d", at[flow])
    at[flow] = at[flow] + step[flow]
  end
  local zadd = {}
  for _, flow in ipairs(listed) do zadd[#zadd + 1], zadd[#zadd + 2] = string.format("%d", at[flow]), flow end
  call_in_chunks("ZADD", finish_key, zadd, 2000)
  return tags
end

-- Lease: makes the queue fair (V starts at NOW) or not, as the broker's
-- configuration says; true when it is.
local function fair_set(fair, is_fair, now)
  if is_fair then
    redis.call("SET", fair, string.format("%d", now), "NX")
    return true
  end
  if redis.call("EXISTS", fair) == 1 then redis.call("DEL", fair, fair_finish_key(fair)) end
  return false
end

-- Lease: V rises to the highest tag leased, HIGHEST (nil: nothing leased),
-- and the flows whose F it passed are forgotten; all of them once the
-- ready set READY is empty (no flow has a job in line: each starts at V).
local function fair_advance(fair, highest, ready)
  local v = tonumber(redis.call("GET", fair))
  if highest and (not v or highest > v) then
    v = highest
    redis.call("SET", fair, string.format("%d", highest))
    redis.call("ZREMRANGEBYSCORE", fair_finish_key(fair), "-inf", string.format("%d", highest))
  end
  if redis.call("ZCARD", ready) == 0 then redis.call("DEL", fair_finish_key(fair)) end
end
