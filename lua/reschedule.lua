--[[
  reschedule: give waiting jobs a new due time (`dueq bulk run_now` and
  `dueq bulk reschedule`). A scheduled or ready job goes to ready when the
  new due time has come, to the schedule otherwise; its record (and first
  due time, `due` in its document) stays as it was. A job that is no
  longer scheduled or ready (leased, finished, gone) is left alone, and so
  is a ready job asked to run now: a page applied twice across a take-over
  changes nothing twice.

  KEYS[1]  schedule    zset  partition -> lower bound of its earliest due ms;
                             partition P is zset KEYS[1]..":"..P and hash
                             KEYS[1]..":"..P..":jobs"; the schedule filter
                             is KEYS[1]..":filter:"..C
  KEYS[2]  ready       zset  id -> due ms
  KEYS[3]  stats       hash  ("scheduled" counts the schedule)
  KEYS[4]  jobs        hash  id -> record of ready, leased and dead jobs

  ARGV[1]  now ms
  ARGV[2]  the new due ms (>= 0; at or before now: ready at once)
  ARGV[3]  N (1..1000)
  ARGV[4+2i], ARGV[5+2i]  for job i: id, its schedule partition (0..32767
           in plain decimal)

  Returns  array of N integers: 1 moved, 0 left alone
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
--! include lib/schedule_put.lua
local now = tonumber(ARGV[1])
local due = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
if not now or not due or due < 0 or due ~= math.floor(due) or not n or n < 1 or n > 1000 or n ~= math.floor(n)
    or #ARGV ~= 3 + 2 * n then
  return redis.error_reply("ERR dueq bad-args reschedule: expected now, a due ms >= 0, N of 1..1000 and N id/partition pairs")
end
for i = 0, n - 1 do
  if ARGV[4 + 2 * i] == "" or not is_partition(ARGV[5 + 2 * i]) then
    return redis.error_reply("ERR dueq bad-args reschedule: job " .. i .. " has no id or a bad partition")
  end
end
local due_text = string.format("%d", due)
local to_ready = due <= now
local out, leaving, arriving = {}, filter_slots(), filter_slots()
for i = 0, n - 1 do
  local id, partition = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  local key = KEYS[1] .. ":" .. partition
  out[i + 1] = 0
  if redis.call("ZSCORE", key, id) then
    if to_ready then
      redis.call("ZREM", key, id)
      redis.call("HSET", KEYS[4], id, redis.call("HGET", key .. ":jobs", id) or "")
      redis.call("HDEL", key .. ":jobs", id)
      redis.call("ZADD", KEYS[2], due_text, id)
      filter_slot_add(leaving, partition, id)
      if redis.call("EXISTS", key) == 0 then redis.call("ZREM", KEYS[1], partition) end
    else
      -- Within its partition: the index entry is only ever lowered (a lower
      -- bound; promote corrects it when it gets there).
      redis.call("ZADD", key, "XX", due_text, id)
      redis.call("ZADD", KEYS[1], "LT", due_text, partition)
    end
    out[i + 1] = 1
  elseif not to_ready and redis.call("ZREM", KEYS[2], id) == 1 then
    schedule_put(KEYS[1], KEYS[4], partition, id, due_text, redis.call("HGET", KEYS[4], id) or "")
    filter_slot_add(arriving, partition, id)
    out[i + 1] = 1
  end
end
schedule_counted_out(KEYS[1], KEYS[3], leaving)
schedule_counted_in(KEYS[1], KEYS[3], arriving)
return out
