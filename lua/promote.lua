--[[
  promote: move jobs whose due time has come from the schedule to the ready
  set, at most LIMIT jobs per call. The schedule index names the partitions
  that may hold due jobs (earliest first); each one's due jobs move with
  their records to the jobs hash, and its index entry is set to its new
  earliest due time or removed when it is empty.

  KEYS[1]  schedule    zset  partition -> lower bound of its earliest due ms;
                             partition P is zset KEYS[1]..":"..P (id -> due
                             ms) and hash KEYS[1]..":"..P..":jobs";
                             KEYS[1]..":filter:"..C are the schedule filter's chunks,
                             KEYS[1]..":type:"..T the type index's bitmaps
                             (a partition it empties loses its bits)
  KEYS[2]  ready       zset  id -> due ms
  KEYS[3]  jobs        hash  id -> job record
  KEYS[4]  stats       hash  ("scheduled" is lowered by the jobs moved)
  KEYS[5]  fair        string the virtual time of fair dispatch, and its
                             flows' finish tags beside it (lib/fair.lua)
  KEYS[6]  weights     hash  key -> its weight in fair dispatch (read)

  ARGV[1]  now ms
  ARGV[2]  limit (1..5000): jobs moved, and partitions looked at, per call
  ARGV[3]  "1": the queue is fair: the jobs moved are scored by their fair
           tags, given in due then id order, and the virtual time starts
           now if it had not (lib/fair.lua); "0": by their due times

  Returns  {moved, next_due}: next_due is a lower bound of the earliest due
           ms left in the schedule (exact unless a cancel took that job), or
           -1 when the schedule is empty or holds only jobs held for their
           groups (lib/group.lua)
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/schedule_filter.lua
--! include lib/chunked.lua
--! include lib/keys.lua
--! include lib/fair.lua
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if #ARGV ~= 3 or not now or not limit or limit < 1 or limit > 5000 or (ARGV[3] ~= "0" and ARGV[3] ~= "1") then
  return redis.error_reply("ERR dueq bad-args promote: expected now, a limit of 1..5000 and fair 0 or 1")
end
local partitions = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, limit)
local moved, removed, removed_slots = 0, 0, filter_slots()
local registered = {}  -- the type index's types, read once if a partition empties
-- A fair queue's jobs are put in line once all are read: their tags follow
-- due order across partitions.
local fair = ARGV[3] == "1" and {} or nil
for _, partition in ipairs(partitions) do
  if removed >= limit then break end
  local key = KEYS[1] .. ":" .. partition
  local due = redis.call("ZRANGEBYSCORE", key, "-inf", now, "WITHSCORES", "LIMIT", 0, limit - removed)
  local count = #due / 2
  if count > 0 then
    -- ZRANGEBYSCORE from -inf returned ranks 0..count-1.
    redis.call("ZREMRANGEBYRANK", key, 0, count - 1)
    local ids = {}
    for j = 1, #due, 2 do
      ids[#ids + 1] = due[j]
      filter_slot_add(removed_slots, partition, due[j])
    end
    local records = redis.call("HMGET", key .. ":jobs", unpack(ids))
    redis.call("HDEL", key .. ":jobs", unpack(ids))
    -- WITHSCORES gives member, score pairs; ZADD wants score, member. An id
    -- without a record (never written by dueq) is dropped, as lease does.
    local ready, records_args = {}, {}
    for j = 1, count do
      if records[j] then
        ready[#ready + 1] = due[2 * j]
        ready[#ready + 1] = ids[j]
        records_args[#records_args + 1] = ids[j]
        records_args[#records_args + 1] = records[j]
      end
    end
    -- Up to 2 x limit values each: in chunks.
    call_in_chunks("HSET", KEYS[3], records_args, 2000)
    if fair then
      for j = 1, #ready, 2 do
        fair[#fair + 1] = {due = tonumber(ready[j]), id = ready[j + 1], record = records_args[j + 1]}
      end
    else
      call_in_chunks("ZADD", KEYS[2], ready, 2000)
    end
    moved = moved + #ready / 2
    removed = removed + count
  end
  local head = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
  if head[2] then
    redis.call("ZADD", KEYS[1], head[2], partition)
  else
    redis.call("ZREM", KEYS[1], partition)
    types_partition_emptied(KEYS[1], partition, registered)
  end
end
if fair and #fair > 0 then
  table.sort(fair, function(a, b) return a.due < b.due or (a.due == b.due and a.id < b.id) end)
  local flows = {}
  for j, job in ipairs(fair) do flows[j] = record_key(job.record) or "" end
  local tags = fair_tags(KEYS[5], KEYS[6], flows, now)
  local ready = {}
  for j, job in ipairs(fair) do ready[2 * j - 1], ready[2 * j] = tags[j], job.id end
  call_in_chunks("ZADD", KEYS[2], ready, 2000)
end
schedule_counted_out(KEYS[1], KEYS[4], removed_slots)
local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local next_due = -1
if head[2] then next_due = tonumber(head[2]) end
-- Jobs held for their groups (lib/group.lua, at 2^52) are due when the
-- script that releases one says so.
if next_due >= 4503599627370496 then next_due = -1 end
return {moved, next_due}
