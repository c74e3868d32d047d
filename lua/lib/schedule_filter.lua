-- Schedule filter, included (by embed.cmake) in every script that puts ids
-- into the schedule, takes them out, or asks whether one is there.
--
-- The string <schedule key>..":filter" holds one 8-bit counter per bucket:
-- bucket P*100+T counts the ids in schedule partition P whose tail is T,
-- T = (a*961 + b*31 + c) % 100 over the bytes a, b, c that
-- string.byte(id, -3, -1) returns (a missing one counts 0). A zero proves
-- the id is not scheduled, so an enqueue skips its look into the partition:
-- with a million jobs scheduled three buckets in four are zero, where every
-- partition holds some. (3.3 MB per queue with a schedule.)
--
-- Soundness rests on every script that changes a partition changing its
-- counters in the same call. A counter that reaches 255 stays there: it can
-- no longer be lowered without maybe hiding an id, and only loses its bucket
-- the shortcut.
local filter_max_args = 1000  -- counters per BITFIELD call: unpack() has a limit

local function filter_tail(id)
  local a, b, c = string.byte(id, -3, -1)
  return ((a or 0) * 961 + (b or 0) * 31 + (c or 0)) % 100
end

-- BITFIELD offset of bucket (partition, tail). It is spliced from the
-- partition's decimal text: formatting a Lua number costs more than the rest
-- of an enqueue's check.
local function filter_bucket(partition_text, tail)
  if partition_text == "0" then return "#" .. tail end
  local units = tail % 10
  return "#" .. partition_text .. string.char(48 + (tail - units) / 10, 48 + units)
end

local function filter_offset(partition_text, id)
  return filter_bucket(partition_text, filter_tail(id))
end

-- Counter values at OFFSETS, in order. (Index arithmetic instead of #t:
-- the length operator is a search, and this runs per enqueued job.)
local function filter_get(filter_key, offsets)
  local values, count = {}, #offsets
  for first = 1, count, filter_max_args do
    local last = math.min(count, first + filter_max_args - 1)
    local args, k = {}, 0
    for j = first, last do
      args[k + 1], args[k + 2], args[k + 3] = "GET", "u8", offsets[j]
      k = k + 3
    end
    local some = redis.call("BITFIELD_RO", filter_key, unpack(args))
    if first == 1 and last == count then return some end
    for j = 1, last - first + 1 do values[first + j - 1] = some[j] end
  end
  return values
end

local function filter_change(filter_key, offsets, by)
  local count = #offsets
  for first = 1, count, filter_max_args do
    local args, k = {"OVERFLOW", "SAT"}, 2
    for j = first, math.min(count, first + filter_max_args - 1) do
      args[k + 1], args[k + 2], args[k + 3], args[k + 4] = "INCRBY", "u8", offsets[j], by
      k = k + 4
    end
    redis.call("BITFIELD", filter_key, unpack(args))
  end
end

-- Counts jobs into and out of the schedule: the filter's counters at
-- OFFSETS (one per job) and the `scheduled` counter of STATS_KEY always
-- change together.
local function schedule_counted_in(schedule_key, stats_key, offsets)
  if #offsets == 0 then return end
  filter_change(schedule_key .. ":filter", offsets, 1)
  redis.call("HINCRBY", stats_key, "scheduled", #offsets)
end

local function schedule_counted_out(schedule_key, stats_key, offsets)
  if #offsets == 0 then return end
  local filter_key = schedule_key .. ":filter"
  local values = filter_get(filter_key, offsets)
  local lower = {}
  for j = 1, #offsets do
    if values[j] < 255 then lower[#lower + 1] = offsets[j] end
  end
  filter_change(filter_key, lower, -1)
  redis.call("HINCRBY", stats_key, "scheduled", -#offsets)
end
