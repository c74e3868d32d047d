--[[
  filter_check: compare the schedule filter's counters for some partitions
  with the ids those partitions hold (lib/schedule_filter.lua), and with
  "set" make them exact. Each call sees its partitions at one instant, so
  jobs moving meanwhile are not reported.

  KEYS[1]  schedule  zset  partition P is zset KEYS[1]..":"..P
  KEYS[2]  filter    prefix of the filter's chunks (strings of counters,
                     PREFIX..":"..C): the schedule's KEYS[1]..":filter", or
                     a new prefix the broker is building to replace it

  ARGV[1]  "check" or "set"
  ARGV[2..] 1..256 partitions (0..32767 in plain decimal)

  Returns  flat array, 4 values per wrong counter: partition, tail, counter,
           ids counted. A counter below its ids could hide a scheduled job;
           one above them only costs look-ups. A counter at 255 is not wrong
           (saturated: it stays). "set" returns the counters it corrected,
           saturated ones included.
  Errors   "ERR dueq bad-args <what>"; nothing is written then
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
local set = ARGV[1] == "set"
if (ARGV[1] ~= "check" and not set) or #ARGV < 2 or #ARGV > 257 then
  return redis.error_reply("ERR dueq bad-args filter_check: expected check or set and 1..256 partitions")
end
for i = 2, #ARGV do
  if not is_partition(ARGV[i]) then
    return redis.error_reply("ERR dueq bad-args filter_check: partition " .. (i - 1) .. " is not 0..32767")
  end
end
local out = {}
for i = 2, #ARGV do
  local partition = ARGV[i]
  local ids = redis.call("ZRANGE", KEYS[1] .. ":" .. partition, 0, -1)
  -- A partition's 100 counters are 100 consecutive bytes of its chunk.
  local row = filter_rows(KEYS[2], tonumber(partition), 1)
  -- The common case, an empty partition with zero counters, costs no loop.
  if #ids > 0 or string.find(row, "[^%z]") then
    local counts = {}
    for tail = 0, 99 do counts[tail] = 0 end
    for _, id in ipairs(ids) do
      local tail = filter_tail(id)
      counts[tail] = counts[tail] + 1
    end
    -- Written per partition: one call's arguments must fit unpack().
    local chunk, within = filter_chunk(partition)
    local writes = {}
    for tail = 0, 99 do
      local exact = math.min(counts[tail], 255)
      local value = string.byte(row, tail + 1) or 0
      if value ~= exact and (set or value ~= 255) then
        out[#out + 1] = tonumber(partition)
        out[#out + 1] = tail
        out[#out + 1] = value
        out[#out + 1] = counts[tail]
        if set then
          writes[#writes + 1] = "SET"
          writes[#writes + 1] = "u8"
          writes[#writes + 1] = filter_bucket(within, tail)
          writes[#writes + 1] = exact
        end
      end
    end
    if #writes > 0 then redis.call("BITFIELD", KEYS[2] .. ":" .. chunk, unpack(writes)) end
  end
end
return out
