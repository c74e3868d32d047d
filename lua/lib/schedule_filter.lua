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

-- Counter values at OFFSETS, in order.
local function filter_get(filter_key, offsets)
  local values = {}
  for first = 1, #offsets, filter_max_args do
    local args = {}
    for j = first, math.min(#offsets, first + filter_max_args - 1) do
      args[#args + 1] = "GET"
      args[#args + 1] = "u8"
      args[#args + 1] = offsets[j]
    end
    for _, v in ipairs(redis.call("BITFIELD_RO", filter_key, unpack(args))) do values[#values + 1] = v end
  end
  return values
end

local function filter_change(filter_key, offsets, by)
  for first = 1, #offsets, filter_max_args do
    local args = {"OVERFLOW", "SAT"}
    for j = first, math.min(#offsets, first + filter_max_args - 1) do
      args[#args + 1] = "INCRBY"
      args[#args + 1] = "u8"
      args[#args + 1] = offsets[j]
      args[#args + 1] = by
    end
    redis.call("BITFIELD", filter_key, unpack(args))
  end
end

local function filter_add(filter_key, offsets)
  filter_change(filter_key, offsets, 1)
end

local function filter_remove(filter_key, offsets)
  local values = filter_get(filter_key, offsets)
  local lower = {}
  for j = 1, #offsets do
    if values[j] < 255 then lower[#lower + 1] = offsets[j] end
  end
  filter_change(filter_key, lower, -1)
end
