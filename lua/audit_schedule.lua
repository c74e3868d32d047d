--[[
  audit_schedule: one step of the audit's walk over a queue's schedule.
  Returns the ids that partitions FIRST .. FIRST+COUNT-1 hold (in their
  sorted sets or their record hashes), the schedule filter counters of
  those partitions that disagree with their sorted sets, as filter_check's
  "check" reports them, and the partitions the schedule index does not name
  by their earliest due time (promote would never look at them), and the
  types of the jobs they hold that the type index registers but whose
  bitmap does not name the partition (a search by that type would skip
  it). Read-only. An empty partition with zero counters
  costs one EXISTS, so a walk over a queue's 32,768 partitions is cheap when
  the queue holds few scheduled jobs; the broker picks COUNT so that a step
  stays near 0.3 ms (about 64 ids, at most 64 partitions; reading the
  records for the type index makes it about a third longer).

  KEYS[1]  schedule  zset partition -> lower bound of its earliest due ms
                     (the index); partition P is KEYS[1]..":"..P (id -> due) and
                     KEYS[1]..":"..P..":jobs" (id -> record)
  KEYS[2]  filter    prefix of the filter's chunks (KEYS[1]..":filter",
                     lib/schedule_filter.lua)

  ARGV[1]  first partition (0..32767, plain decimal)
  ARGV[2]  count, 1..512, with first + count <= 32768

  Returns  {ids, wrong, unindexed, untyped}: ids, each once; wrong, 4
           values per wrong counter: partition, tail, counter, ids counted (a
           counter at 255 is saturated, not wrong); unindexed, 2 values per
           partition whose index entry is missing or later than its earliest
           due: partition, earliest due ms; untyped, 2 strings per (partition,
           type) the type index misses: partition (decimal), type
  Errors   "ERR dueq bad-args <what>"
]]
--! include lib/partition.lua
--! include lib/schedule_filter.lua
if #ARGV ~= 2 or not is_partition(ARGV[1]) then
  return redis.error_reply("ERR dueq bad-args audit_schedule: expected a first partition 0..32767 and a count")
end
local first, count = tonumber(ARGV[1]), tonumber(ARGV[2])
if count == nil or ARGV[2] ~= string.format("%d", count) or count < 1 or count > 512 or first + count > 32768 then
  return redis.error_reply("ERR dueq bad-args audit_schedule: count must be 1..512 and stay within 32768 partitions")
end
-- The counters of these partitions, 100 bytes each (one GETRANGE per chunk).
local rows = filter_rows(KEYS[2], first, count)
local ids, seen, wrong, unindexed, untyped = {}, {}, {}, {}, {}
-- The registered types (the type index), read once: a queue with none (its
-- schedule emptied since, or its types past types_max from the start) has
-- no record read, only its ids.
local registered = {}
for _, t in ipairs(redis.call("SMEMBERS", KEYS[1] .. ":types")) do registered[t] = true end
local any_registered = next(registered) ~= nil
-- Lua strings are interned: comparing a row with this one is a pointer test,
-- so only rows that are not all zero are searched byte by byte.
local zero_row = string.rep("\0", 100)
for p = first, first + count - 1 do
  local key = KEYS[1] .. ":" .. p
  local row = string.sub(rows, (p - first) * 100 + 1, (p - first) * 100 + 100)
  if (row ~= zero_row and string.find(row, "[^%z]")) or redis.call("EXISTS", key, key .. ":jobs") > 0 then
    local scheduled = redis.call("ZRANGE", key, 0, -1, "WITHSCORES")
    if #scheduled > 0 then
      local earliest = tonumber(scheduled[2])
      local indexed = redis.call("ZSCORE", KEYS[1], p)
      if not indexed or tonumber(indexed) > earliest then
        unindexed[#unindexed + 1] = p
        unindexed[#unindexed + 1] = earliest
      end
    end
    -- Sparse: only the tails that hold ids or have a counter above zero.
    local counts = {}
    for i = 1, #scheduled, 2 do
      local id = scheduled[i]
      local tail = filter_tail(id)
      counts[tail] = (counts[tail] or 0) + 1
      if not seen[id] then
        seen[id] = true
        ids[#ids + 1] = id
      end
    end
    local fields = redis.call(any_registered and "HGETALL" or "HKEYS", key .. ":jobs")
    local stride = any_registered and 2 or 1
    local missed = {}
    for i = 1, #fields, stride do
      local id = fields[i]
      if not seen[id] then
        seen[id] = true
        ids[#ids + 1] = id
      end
      local t = any_registered and record_type(fields[i + 1])
      if t and registered[t] and not missed[t] and redis.call("BITPOS", KEYS[1] .. ":type:" .. t, 1, p, p, "BIT") ~= p then
        missed[t] = true
        untyped[#untyped + 1] = string.format("%d", p)
        untyped[#untyped + 1] = t
      end
    end
    local at = string.find(row, "[^%z]")
    while at do
      if counts[at - 1] == nil then counts[at - 1] = 0 end
      at = string.find(row, "[^%z]", at + 1)
    end
    for tail, ids_counted in pairs(counts) do
      local value = string.byte(row, tail + 1) or 0
      if value ~= math.min(ids_counted, 255) and value ~= 255 then
        wrong[#wrong + 1] = p
        wrong[#wrong + 1] = tail
        wrong[#wrong + 1] = value
        wrong[#wrong + 1] = ids_counted
      end
    end
  end
end
return {ids, wrong, unindexed, untyped}
