--[[
  enqueue: store a batch of new jobs of one queue.

  A job whose id the queue already knows (scheduled, ready, leased, dead, or
  done/cancelled within the retention period) is not written again: a
  producer that retries an enqueue never makes a second job.

  A job due now goes to the ready set with its record in the jobs hash, or,
  when the broker has a worker with room for it, is leased at once: the
  broker passes a lease deadline and one fencing token per lease candidate
  (the first L jobs due now, in argument order), and while the ready set is
  empty (older ready jobs go first) each accepted candidate is written as
  lease.lua would lease it (leased set, token) instead of to the ready set,
  unless the queue is paused.
  A job due later goes to its schedule partition P (given by the broker):
  zset KEYS[1]..":"..P (id -> due ms) and hash KEYS[1]..":"..P..":jobs"
  (id -> record), and the partition's entry in KEYS[1] is lowered to its due
  time if that is earlier. The schedule filter (lib/schedule_filter.lua)
  counts it.

  KEYS[1]  schedule    zset  partition -> lower bound of its earliest due ms;
                             KEYS[1]..":filter:"..C are the schedule filter's chunks
  KEYS[2]  ready       zset  id -> due ms, jobs due now
  KEYS[3]  leased      zset  id -> lease deadline ms (and an encoding pin at +inf)
  KEYS[4]  stats       hash  counters ("scheduled" = jobs in the schedule)
  KEYS[5]  jobs        hash  id -> job record
  KEYS[6]  done        zset  id -> finished ms
  KEYS[7]  cancelled   zset  id -> finished ms
  KEYS[8]  tokens      hash  id -> fencing token of the current lease
  KEYS[9]  paused      string present while the queue is paused: nothing is
                             leased at once (lease.lua holds the rest back)
  KEYS[10] key limits  hash  present while some key has a limit of its own
                             (lib/keys.lua): a job with a key is then not
                             leased at once (lease.lua applies the limits)
  KEYS[11] unique      hash  id -> mode and unique key of the jobs holding
                             one; KEYS[11]..":"..K is the holder of unique
                             key K (lib/unique.lua)
  KEYS[12] dead        zset  (read: a dead holder holds nothing)
  KEYS[13] fair        string the virtual time of fair dispatch, and its
                             flows' finish tags beside it (lib/fair.lua)
  KEYS[14] weights     hash  key -> its weight in fair dispatch (read)
  KEYS[15] key rates   hash  present while some key has a rate limit of its
                             own: a job with a key is then not leased at
                             once, as with KEYS[10]

  ARGV[1]  now ms
  ARGV[2]  max backlog: the most unfinished jobs (scheduled + ready +
           leased) the queue may hold; new jobs past it are refused, each
           answered 2, duplicates still 0 (0 = no limit)
  ARGV[3]  N, number of jobs (1..1000)
  ARGV[4+4i .. 7+4i] for job i: id, due ms (>= 0), job record (a msgpack
           array of 9 starting with version 2, of 10 starting with version
           3 when the job has a key, of 11 with version 4 (a start-by
           deadline), of 13 with version 5 (a trace context):
           broker/store/job_record.hpp),
           schedule partition (0..32767 in plain decimal: it is part of a key)
  ARGV[4+4N+3i .. 6+4N+3i] for job i, or none for any job (F = 3 or 0):
           "GET", "u8", the bit offset of the job's schedule filter bucket
           within its chunk (filter_bit_offset), BITFIELD_RO arguments
           passed on as they are; checked where the filter is read (when
           anything is scheduled). Jobs of one filter chunk next to each
           other share one BITFIELD_RO (any order works). Without them the
           script works them out itself when it reads the filter: the broker
           leaves them out while it knows of nothing scheduled in the queue.
  ARGV[4+(4+F)N]  lease deadline ms for jobs leased at once (0: lease none)
  ARGV[5+(4+F)N]  their tokens: 16 lowercase hex digits each, not all zero,
              one per lease candidate (L = length / 16, at most N; "" with a
              deadline of 0)
  ARGV[6+(4+F)N+4u .. 9+(4+F)N+4u] for the u-th unique job (U of them, in
              job order): its job number (1..N), its unique key (1..128
              bytes), how long it holds it ("w" until first leased, "s"
              until started, "d" until done, "p" for a period, "b"
              debounced: while scheduled) and the period in ms (1.. with
              "p"; with "b" the most a debounce may delay the job past its
              first enqueue; else 0)
  ARGV[last - 1]  U (0..N)
  ARGV[last]  "1": the queue is fair: the jobs put in the ready set are
              scored by their fair tags (lib/fair.lua), and the virtual time
              starts now if it had not; "0": by their due times

  Returns  array of N integers: 1 accepted, 0 duplicate, 2 refused (backlog),
           3 accepted and leased under the token of its candidate number
           (the c-th job due now in argument order has the c-th token),
           4 duplicate by its unique key, 5 debounced (the scheduled job
           holding its unique key took its record and its due time, at
           most that job's deadline); then, for each 4 or 5 in job order,
           the id of the job holding that key
  Errors   "ERR dueq bad-args <what>"; nothing is written then
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
--! include lib/encoding_pin.lua
--! include lib/unique.lua
--! include lib/keys.lua
--! include lib/chunked.lua
--! include lib/fair.lua
local now = tonumber(ARGV[1])
local max_backlog = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local n_unique = tonumber(ARGV[#ARGV - 1])
local fair = ARGV[#ARGV] == "1"
local last = n_unique and #ARGV - 2 - 4 * n_unique  -- the lease tokens' place
if not now or not max_backlog or max_backlog < 0 or not n or n < 1 or n > 1000 or not n_unique or n_unique < 0
    or n_unique > n or n_unique % 1 ~= 0 or (last ~= 5 + 7 * n and last ~= 5 + 4 * n)
    or (ARGV[#ARGV] ~= "0" and not fair) then
  return redis.error_reply("ERR dueq bad-args enqueue: expected now, max_backlog, N, 4 or 7 values per job, "
    .. "a lease deadline, lease tokens, 4 values per unique job, their number and fair 0 or 1")
end
local with_filter_args = last == 5 + 7 * n
local lease_deadline_text = ARGV[last - 1]
local lease_deadline = tonumber(lease_deadline_text)
local lease_tokens = ARGV[last]
-- Job number -> {key, mode, period ms} of its unique key.
local unique_of = {}
for u = 0, n_unique - 1 do
  local at = last + 1 + 4 * u
  local job, ukey, mode, period = tonumber(ARGV[at]), ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3])
  if not job or job < 1 or job > n or job % 1 ~= 0 or unique_of[job] or #ukey < 1 or #ukey > 128
      or (mode ~= "w" and mode ~= "s" and mode ~= "d" and mode ~= "p" and mode ~= "b") or not period or period % 1 ~= 0
      or (mode == "p" or mode == "b") ~= (period >= 1) or period < 0 then
    return redis.error_reply("ERR dueq bad-args enqueue: unique job " .. u .. " has a bad job number, key, mode or period")
  end
  unique_of[job] = {key = ukey, mode = mode, period = ARGV[at + 3]}
end
local candidates = #lease_tokens / 16
if not lease_deadline or lease_deadline < 0 or #lease_tokens % 16 ~= 0 or candidates > n
    or (lease_deadline == 0) ~= (candidates == 0) then
  return redis.error_reply("ERR dueq bad-args enqueue: the lease deadline and tokens do not match")
end
local lease_token = {}
for c = 1, candidates do
  local t = string.sub(lease_tokens, 16 * c - 15, 16 * c)
  if not string.find(t, "^[0-9a-f]+$") or t == "0000000000000000" then
    return redis.error_reply("ERR dueq bad-args enqueue: lease token " .. c .. " is not 16 hex digits or is zero")
  end
  lease_token[c] = t
end
local filter_args = 3 + 4 * n  -- job i's BITFIELD_RO arguments are ARGV[filter_args + 3i + 1 .. 3]
local ids, dues = {}, {}  -- dues as numbers: tonumber is a strtod per call
local argv, byte = ARGV, string.byte  -- locals: a global is a table lookup per use
local valid_partitions = {}  -- the jobs of a call mostly share a few partitions
for i = 0, n - 1 do
  local b = 4 + 4 * i
  local due = tonumber(argv[b + 1])
  local array, version = byte(argv[b + 2], 1, 2)
  local partition = argv[b + 3]
  if not valid_partitions[partition] and is_partition(partition) then valid_partitions[partition] = true end
  -- 0x99 = msgpack fixarray of 9, then the record version 2, or 0x9a
  -- (of 10) and version 3 for a job with a key, 0x9b (of 11) and version
  -- 4 for one with a start-by deadline, or 0x9d (of 13) and version 5 for
  -- one with a trace context.
  if argv[b] == "" or not due or due < 0
      or not ((array == 0x99 and version == 2) or (array == 0x9a and version == 3) or (array == 0x9b and version == 4)
        or (array == 0x9d and version == 5))
      or not valid_partitions[partition] then
    return redis.error_reply("ERR dueq bad-args enqueue: job " .. i
      .. " has an empty id, a bad due, a bad record or a bad partition")
  end
  ids[i + 1] = argv[b]
  dues[i + 1] = due
end

local out = {}
-- Room for new jobs under the backlog: delayed ones count too, or a flood of
-- jobs due in a second would pass the limit and all come due at once.
local room = n
local scheduled_now = tonumber(redis.call("HGET", KEYS[4], "scheduled")) or 0
if max_backlog > 0 then
  room = max_backlog - redis.call("ZCARD", KEYS[2]) - count_leases(KEYS[3]) - scheduled_now
  if room <= 0 then
    for i = 1, n do out[i] = 2 end
    return out
  end
end
-- Variadic reads find duplicates among live, done and cancelled jobs. The
-- schedule is asked per job, in the job's own partition's sorted set, and
-- only where the schedule filter's counter is not zero. With nothing
-- scheduled (the `scheduled` counter changes with the filter's counters,
-- and the audit's accounting law checks it) the filter is not read.
-- A queue that never cancelled a job (or whose done set is empty) has no
-- such key: an EXISTS spares turning every id into an argument for nothing.
local function scores_in(key)
  if redis.call("EXISTS", key) == 0 then return {} end
  return redis.call("ZMSCORE", key, unpack(ids))
end
local live = redis.call("HMGET", KEYS[5], unpack(ids))
local done = scores_in(KEYS[6])
local cancelled = scores_in(KEYS[7])
local maybe_scheduled = nil
if scheduled_now > 0 and with_filter_args then
  -- The broker's filter arguments go to BITFIELD_RO unchanged, one call per
  -- run of jobs in one chunk: building them here cost a loaded store about
  -- a third of the enqueue's time.
  local runs = {}  -- {first job, chunk} of each run
  for i = 1, n do
    local f = filter_args + 3 * i - 3
    local partition = tonumber(ARGV[4 * i + 3])
    if ARGV[f + 1] ~= "GET" or ARGV[f + 2] ~= "u8" or tonumber(ARGV[f + 3]) ~= filter_bit_offset(partition, ids[i])
        or not string.find(ARGV[f + 3], "^%d+$") then
      return redis.error_reply("ERR dueq bad-args enqueue: job " .. (i - 1)
        .. " has filter arguments other than GET u8 <its bucket's bit offset>")
    end
    local chunk = (partition - partition % 1000) / 1000
    if #runs == 0 or runs[#runs].chunk ~= chunk then runs[#runs + 1] = {first = i, chunk = chunk} end
  end
  maybe_scheduled = {}
  for r = 1, #runs do
    local first, last = runs[r].first, r < #runs and runs[r + 1].first - 1 or n
    local counters = redis.call("BITFIELD_RO", KEYS[1] .. ":filter:" .. runs[r].chunk,
      unpack(ARGV, filter_args + 3 * first - 2, filter_args + 3 * last))
    for j = first, last do maybe_scheduled[j] = counters[j - first + 1] end
  end
elseif scheduled_now > 0 then
  -- Left out by a broker that knew of nothing scheduled: built here.
  local slots = filter_slots()
  for i = 1, n do filter_slot_add(slots, argv[4 * i + 3], ids[i]) end
  maybe_scheduled = filter_get(KEYS[1] .. ":filter", slots)
end
-- Older ready jobs are leased first, by lease.lua: new ones then wait in line.
if candidates > 0 and (redis.call("ZCARD", KEYS[2]) > 0 or redis.call("EXISTS", KEYS[9]) == 1) then candidates = 0 end
local key_limits_set = nil  -- whether KEYS[10] exists, looked up for the first keyed candidate
local due_now_seen = 0  -- jobs due now so far, in argument order: a job's candidate number
local seen = {}
-- Appended through counters: Lua 5.1's # is a search, and this runs per job.
local records, ready, leases, tokens, nr, nready, nl = {}, {}, {}, {}, 0, 0, 0
local ready_at = {}  -- where each job put in the ready set is in ARGV, for a fair queue's tags
local partitions = {}  -- partition number -> {zadd args, hset args, earliest due}
local accepted, scheduled_slots = 0, filter_slots()
local taken, holds, holders = {}, {}, {}  -- unique key -> id taken in this call; HSET args; ids of 4s and 5s
local debounce_pending = {}  -- unique key -> its holder's entry in `partitions`, taken in this call (debounce)
-- The id of the job holding unique key U.key, or nil: one taken earlier in
-- this call, a period's holder (its string expires with the period), or a
-- holder still scheduled, ready, leased or retrying (not dead; a hold left
-- by a job gone otherwise holds nothing).
local function unique_held_by(u)
  if taken[u.key] then return taken[u.key] end
  local holder, mode, partition = unique_holder(redis.call("GET", unique_string(KEYS[11], u.key)))
  if not holder then return nil end
  if mode == "b" then
    -- A debounced job holds its key while it is scheduled.
    if redis.call("ZSCORE", KEYS[1] .. ":" .. partition, holder) then return holder, partition end
    return nil
  end
  if mode == "p" or redis.call("ZSCORE", KEYS[1] .. ":" .. partition, holder)
      or (redis.call("HEXISTS", KEYS[5], holder) == 1 and not redis.call("ZSCORE", KEYS[12], holder)) then
    return holder
  end
  return nil
end

-- Debounce: the scheduled job HOLDER (in PARTITION, or taken in this call)
-- takes job B's record (payload, type...) and B's due time, but no later
-- than the deadline its first enqueue set (its unique entry).
local function debounce_into(holder, partition, u, b)
  local pending = debounce_pending[u.key]
  if pending then
    local due = math.min(dues[b / 4], pending.deadline)
    pending.p.zadd[pending.zi] = string.format("%d", due)
    pending.p.hset[pending.hi] = argv[b + 2]
    if due < pending.p.earliest then pending.p.earliest, pending.p.earliest_text = due, string.format("%d", due) end
    return
  end
  -- Without its entry (a store edited by hand) the holder has no deadline
  -- to keep: the new due time stands, never 0.
  local entry = redis.call("HGET", KEYS[11], holder) or ""
  local deadline = tonumber(string.sub(entry, 2, 17)) or dues[b / 4]
  local due_text = string.format("%d", math.min(dues[b / 4], deadline))
  local key = KEYS[1] .. ":" .. partition
  redis.call("HSET", key .. ":jobs", holder, argv[b + 2])
  redis.call("ZADD", key, "XX", due_text, holder)
  redis.call("ZADD", KEYS[1], "LT", due_text, partition)
  local typed = {}
  type_slot_add(typed, partition, argv[b + 2])
  types_marked(KEYS[1], typed)
end
for i = 1, n do
  local id = ids[i]
  local b = 4 * i
  local candidate = nil
  local due = dues[i]
  if due <= now then
    due_now_seen = due_now_seen + 1
    if due_now_seen <= candidates then candidate = due_now_seen end
    -- A record with a key (version 3, or 4 or 5 with a non-empty one).
    if candidate and record_key(argv[b + 2]) then
      if key_limits_set == nil then key_limits_set = redis.call("EXISTS", KEYS[10], KEYS[15]) > 0 end
      if key_limits_set then candidate = nil end
    end
  end
  local u = unique_of[i]
  local holder, holder_partition = nil, nil
  if live[i] or done[i] or cancelled[i] or seen[id]
      or (maybe_scheduled and maybe_scheduled[i] > 0 and redis.call("ZSCORE", KEYS[1] .. ":" .. argv[b + 3], id)) then
    out[i] = 0
  elseif u then
    holder, holder_partition = unique_held_by(u)
  end
  if holder and u.mode == "b" and (debounce_pending[u.key] or holder_partition) then
    debounce_into(holder, holder_partition, u, b)
    out[i] = 5
    holders[#holders + 1] = holder
  elseif holder then
    out[i] = 4
    holders[#holders + 1] = holder
  elseif out[i] then
    -- a duplicate by its id
  elseif accepted >= room then
    out[i] = 2
  else
    seen[id] = true
    -- Scores are written from their ARGV strings: formatting a Lua number
    -- back into a string costs more than the rest of the write.
    if due <= now then
      records[nr + 1], records[nr + 2] = id, argv[b + 2]
      nr = nr + 2
      if candidate then
        leases[nl + 1], leases[nl + 2] = lease_deadline_text, id
        tokens[nl + 1], tokens[nl + 2] = id, lease_token[candidate]
        nl = nl + 2
      else
        ready[nready + 1], ready[nready + 2] = argv[b + 1], id
        nready = nready + 2
        ready_at[nready / 2] = b
      end
    else
      local partition = argv[b + 3]
      local p = partitions[partition]
      if not p then
        p = {key = KEYS[1] .. ":" .. partition, zadd = {}, hset = {}, earliest = due, earliest_text = argv[b + 1]}
        partitions[partition] = p
      end
      p.zadd[#p.zadd + 1] = argv[b + 1]
      p.zadd[#p.zadd + 1] = id
      p.hset[#p.hset + 1] = id
      p.hset[#p.hset + 1] = argv[b + 2]
      if due < p.earliest then p.earliest, p.earliest_text = due, argv[b + 1] end
      filter_slot_add(scheduled_slots, partition, id)
      type_slot_add(scheduled_slots, partition, argv[b + 2])
    end
    accepted = accepted + 1
    out[i] = candidate and 3 or 1
    -- A job leased at once no longer waits: "w" holds nothing; nor does a
    -- debounced job that is not scheduled.
    if u and not (u.mode == "w" and candidate) and not (u.mode == "b" and due <= now) then
      local s = unique_string(KEYS[11], u.key)
      local value = u.mode .. argv[b + 3] .. ":" .. id
      if u.mode == "p" then redis.call("SET", s, value, "PX", u.period) else redis.call("SET", s, value) end
      local entry = u.mode .. u.key
      if u.mode == "b" then
        -- Its deadline: the latest a debounce may move it to.
        entry = "b" .. string.format("%016d", now + tonumber(u.period)) .. u.key
        local p = partitions[argv[b + 3]]
        debounce_pending[u.key] = {p = p, zi = #p.zadd - 1, hi = #p.hset, deadline = now + tonumber(u.period)}
      end
      holds[#holds + 1], holds[#holds + 2] = id, entry
      taken[u.key] = id
    end
  end
end
if #holds > 0 then redis.call("HSET", KEYS[11], unpack(holds)) end
if nr > 0 then redis.call("HSET", KEYS[5], unpack(records)) end
if nready > 0 then
  if fair then
    local flows = {}
    for j = 1, nready / 2 do flows[j] = record_key(argv[ready_at[j] + 2]) or "" end
    local tags = fair_tags(KEYS[13], KEYS[14], flows, now)
    for j = 1, #tags do ready[2 * j - 1] = tags[j] end
  end
  redis.call("ZADD", KEYS[2], unpack(ready))
end
if nl > 0 then
  redis.call("ZADD", KEYS[3], unpack(leases))
  redis.call("HSET", KEYS[8], unpack(tokens))
end
for partition, p in pairs(partitions) do
  redis.call("ZADD", p.key, unpack(p.zadd))
  redis.call("HSET", p.key .. ":jobs", unpack(p.hset))
  -- LT adds a missing partition and only ever lowers a present one.
  redis.call("ZADD", KEYS[1], "LT", p.earliest_text, partition)
end
schedule_counted_in(KEYS[1], KEYS[4], scheduled_slots)
if accepted > 0 then redis.call("HINCRBY", KEYS[4], "accepted", accepted) end
for h = 1, #holders do out[n + h] = holders[h] end
return out
