-- Schedule filter and type index, included (by embed.cmake) in every script
-- that puts ids into the schedule, takes them out, or asks whether one is
-- there (and in search.lua, which reads the type index).
--
-- One 8-bit counter per bucket: bucket (P, T) counts the ids in schedule
-- partition P whose tail is T, T = (a*961 + b*31 + c) % 100 over the bytes
-- a, b, c that string.byte(id, -3, -1) returns (a missing one counts 0). A
-- zero proves the id is not scheduled, so an enqueue skips its look into
-- the partition: with a million jobs scheduled three buckets in four are
-- zero, where every partition holds some.
--
-- The counters are kept in chunks of 1,000 partitions: the string
-- <schedule key>..":filter:"..C holds the 100,000 counters of partitions
-- 1000*C .. 1000*C+999 (C = 0..32), bucket (P, T) at byte (P % 1000)*100 + T.
-- A chunk exists once one of its partitions has held a job, so a queue
-- with one scheduled job costs 100 KB (3.3 MB with jobs in every chunk),
-- not the whole filter; all chunks go when the schedule empties. (Chunks of 100 partitions cost a batch of 1,000
-- enqueues about 300 BITFIELD calls instead of 33.)
--
-- Soundness rests on every script that changes a partition changing its
-- counters in the same call. A counter that reaches 255 stays there: it can
-- no longer be lowered without maybe hiding an id, and only loses its bucket
-- the shortcut.
--
-- Callers collect the buckets of their ids as "slots" (filter_slots,
-- filter_slot_add) and read or change them in one go, one BITFIELD per
-- chunk touched.
local filter_max_args = 1000  -- counters per BITFIELD call: unpack() has a limit
local filter_chunks = 33      -- chunks 0..32 cover partitions 0..32767 (broker/store/schedule_partition.hpp)

local function filter_tail(id)
  local a, b, c = string.byte(id, -3, -1)
  return ((a or 0) * 961 + (b or 0) * 31 + (c or 0)) % 100
end

-- The bucket of an id in partition P (a number) as a BITFIELD bit offset
-- within P's chunk: the form the broker sends enqueue.lua
-- (schedule_filter_bit_offset in broker/store/schedule_partition.hpp), checked against this.
local function filter_bit_offset(partition, id)
  return ((partition % 1000) * 100 + filter_tail(id)) * 8
end

-- The chunk of a partition and its partition within the chunk (0..999),
-- both in plain decimal, cut from the partition's decimal text: formatting
-- a Lua number costs more than the rest of an enqueue's check.
local function filter_chunk(partition_text)
  if #partition_text <= 3 then return "0", partition_text end
  local within = string.sub(partition_text, -3)
  if string.byte(within) == 48 then within = string.sub(within, 2) end
  if string.byte(within) == 48 then within = string.sub(within, 2) end
  return string.sub(partition_text, 1, -4), within
end

-- BITFIELD offset, within its chunk, of bucket (partition, tail), given the
-- partition's number within the chunk as filter_chunk returns it.
local function filter_bucket(within_text, tail)
  if within_text == "0" then return "#" .. tail end
  local units = tail % 10
  return "#" .. within_text .. string.char(48 + (tail - units) / 10, 48 + units)
end

local function filter_slots()
  return {n = 0, chunks = {}, offsets = {}}
end

local function filter_slot_add(slots, partition_text, id)
  local chunk, within = filter_chunk(partition_text)
  local n = slots.n + 1
  slots.n = n
  slots.chunks[n] = chunk
  slots.offsets[n] = filter_bucket(within, filter_tail(id))
end

local function filter_slot_copy(to, from, i)
  local n = to.n + 1
  to.n = n
  to.chunks[n] = from.chunks[i]
  to.offsets[n] = from.offsets[i]
end

-- The slots of each chunk, and the chunks in the order first seen.
local function filter_groups(slots)
  local groups, order = {}, {}
  for i = 1, slots.n do
    local chunk = slots.chunks[i]
    local group = groups[chunk]
    if group == nil then
      group = {n = 0}
      groups[chunk] = group
      order[#order + 1] = chunk
    end
    group.n = group.n + 1
    group[group.n] = i
  end
  return groups, order
end

-- Counter values of SLOTS, in order. (Index arithmetic instead of #t:
-- the length operator is a search, and this runs per enqueued job.)
local function filter_get(filter_prefix, slots)
  local values = {}
  local groups, order = filter_groups(slots)
  for _, chunk in ipairs(order) do
    local group = groups[chunk]
    for first = 1, group.n, filter_max_args do
      local last = math.min(group.n, first + filter_max_args - 1)
      local args, k = {}, 0
      for j = first, last do
        args[k + 1], args[k + 2], args[k + 3] = "GET", "u8", slots.offsets[group[j]]
        k = k + 3
      end
      local some = redis.call("BITFIELD_RO", filter_prefix .. ":" .. chunk, unpack(args))
      for j = first, last do values[group[j]] = some[j - first + 1] end
    end
  end
  return values
end

local function filter_change(filter_prefix, slots, by)
  local groups, order = filter_groups(slots)
  for _, chunk in ipairs(order) do
    local group = groups[chunk]
    for first = 1, group.n, filter_max_args do
      local args, k = {"OVERFLOW", "SAT"}, 2
      for j = first, math.min(group.n, first + filter_max_args - 1) do
        args[k + 1], args[k + 2], args[k + 3], args[k + 4] = "INCRBY", "u8", slots.offsets[group[j]], by
        k = k + 4
      end
      redis.call("BITFIELD", filter_prefix .. ":" .. chunk, unpack(args))
    end
  end
end

-- The 100 counters of each partition FIRST .. FIRST+COUNT-1 (numbers),
-- concatenated; a chunk that does not exist reads as zeros.
local function filter_rows(filter_prefix, first, count)
  local parts, p, last = {}, first, first + count - 1
  while p <= last do
    local chunk = math.floor(p / 1000)
    local upto = math.min(last, chunk * 1000 + 999)
    local want = (upto - p + 1) * 100
    local row = redis.call("GETRANGE", filter_prefix .. ":" .. chunk, (p % 1000) * 100, (upto % 1000) * 100 + 99)
    if #row < want then row = row .. string.rep("\0", want - #row) end
    parts[#parts + 1] = row
    p = upto + 1
  end
  return table.concat(parts)
end

-- Type index: for up to types_max job types per queue, a bitmap
-- <schedule key>..":type:"..TYPE whose bit P is set while partition P may
-- hold a job of that type, so that a search by type reads those partitions
-- only. <schedule key>..":types" is the set of the types indexed. A type is
-- indexed only while <schedule key>..":typed" exists, which the put that
-- finds the schedule empty sets: from then on every put of an indexed type
-- sets its bit, so an indexed type's bitmap misses no partition (a store
-- whose schedule was filled before the index existed is indexed once its
-- schedule has emptied). A bit may outlive its jobs (one cancelled, moved,
-- or promoted from a partition that keeps others): a search then reads a
-- partition for nothing. Promote clears a partition's bits when it empties
-- it, and all of these keys go when the schedule empties. At most
-- types_max bitmaps of 4 KB each (64 KB, less than one chunk of the
-- filter), so that a producer's types cannot make a queue's index grow
-- without bound; a type past them is found by a scan.
local types_max = 16
local types_bits_per_call = 250  -- BITFIELD SET arguments: 4 per bit

-- The type of a job record ([version, type, ...], broker/store/job_record.cpp),
-- read without its payload, or nil.
local function record_type(record)
  if not record then return nil end
  local head, version, b = string.byte(record, 1, 3)
  if (head ~= 0x9d and head ~= 0x9b and head ~= 0x9a and head ~= 0x99 and head ~= 0x98) or not version or version > 0x7f or not b then return nil end
  if b >= 0xa0 and b <= 0xbf then return string.sub(record, 4, 3 + b - 0xa0) end
  local len_at, len_bytes = 4, ({[0xd9] = 1, [0xda] = 2, [0xdb] = 4})[b]
  if not len_bytes then return nil end
  local len = 0
  for i = len_at, len_at + len_bytes - 1 do len = len * 256 + (string.byte(record, i) or 0) end
  return string.sub(record, len_at + len_bytes, len_at + len_bytes + len - 1)
end

-- Notes that the job whose record is RECORD went into partition
-- PARTITION_TEXT, for schedule_counted_in to index.
local function type_slot_add(slots, partition_text, record)
  local t = record_type(record)
  if not t then return end
  local types = slots.types
  if not types then
    types = {}
    slots.types = types
  end
  local marks = types[t]
  if not marks then
    marks = {n = 0}
    types[t] = marks
  end
  marks.n = marks.n + 1
  marks[marks.n] = partition_text
end

-- Sets (VALUE 1) or clears (0) the bits of PARTITIONS (n of them) in
-- TYPE's bitmap.
local function type_bits(schedule_key, t, partitions, n, value)
  local key = schedule_key .. ":type:" .. t
  for first = 1, n, types_bits_per_call do
    local args, k = {}, 0
    for i = first, math.min(n, first + types_bits_per_call - 1) do
      args[k + 1], args[k + 2], args[k + 3], args[k + 4] = "SET", "u1", partitions[i], value
      k = k + 4
    end
    redis.call("BITFIELD", key, unpack(args))
  end
end

local function types_marked(schedule_key, slots)
  if not slots.types then return end
  local registry = schedule_key .. ":types"
  local room = nil  -- how many more types may be indexed, asked once
  for t, marks in pairs(slots.types) do
    local indexed = redis.call("SISMEMBER", registry, t) == 1
    if not indexed then
      if room == nil then
        room = 0
        if redis.call("EXISTS", schedule_key .. ":typed") == 1 then room = types_max - redis.call("SCARD", registry) end
      end
      if room > 0 then
        redis.call("SADD", registry, t)
        room, indexed = room - 1, true
      end
    end
    if indexed then type_bits(schedule_key, t, marks, marks.n, 1) end
  end
end

-- Partition PARTITION_TEXT holds no job any more: its bits are cleared.
-- REGISTERED caches the indexed types over one call ({} to start).
local function types_partition_emptied(schedule_key, partition_text, registered)
  if not registered.types then registered.types = redis.call("SMEMBERS", schedule_key .. ":types") end
  for _, t in ipairs(registered.types) do type_bits(schedule_key, t, {partition_text}, 1, 0) end
end

local function types_dropped(schedule_key)
  local registry = schedule_key .. ":types"
  local keys = {registry, schedule_key .. ":typed"}
  for _, t in ipairs(redis.call("SMEMBERS", registry)) do keys[#keys + 1] = schedule_key .. ":type:" .. t end
  redis.call("DEL", unpack(keys))
end

-- Counts jobs into and out of the schedule: the filter's counters of SLOTS
-- (one per job) and the `scheduled` counter of STATS_KEY always change
-- together, and so do the type index's bits of the types in SLOTS
-- (type_slot_add).
local function schedule_counted_in(schedule_key, stats_key, slots)
  if slots.n == 0 then return end
  filter_change(schedule_key .. ":filter", slots, 1)
  if redis.call("HINCRBY", stats_key, "scheduled", slots.n) == slots.n then
    -- The schedule was empty: the type index starts complete.
    redis.call("SET", schedule_key .. ":typed", "1")
  end
  types_marked(schedule_key, slots)
end

local function schedule_counted_out(schedule_key, stats_key, slots)
  if slots.n == 0 then return end
  local filter_prefix = schedule_key .. ":filter"
  local values = filter_get(filter_prefix, slots)
  local lower = filter_slots()
  for j = 1, slots.n do
    if values[j] < 255 then filter_slot_copy(lower, slots, j) end
  end
  filter_change(filter_prefix, lower, -1)
  -- An empty schedule leaves every counter at zero but for saturated ones,
  -- which no id needs any more: its chunks are dropped, not kept at 100 KB
  -- each for a queue that may never schedule again.
  if redis.call("HINCRBY", stats_key, "scheduled", -slots.n) <= 0 then
    local chunk_keys = {}
    for chunk = 0, filter_chunks - 1 do chunk_keys[chunk + 1] = filter_prefix .. ":" .. chunk end
    redis.call("DEL", unpack(chunk_keys))
    types_dropped(schedule_key)
  end
end
