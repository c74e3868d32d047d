--[[
  reschedule: give waiting jobs a new due time (`dueq bulk run_now` and
  `dueq bulk reschedule`). A scheduled or ready job goes to ready when the
  new due time has come, to the schedule otherwise; its record (and first
  due time, `due` in its document) stays as it was. A job that is no
  longer scheduled or ready (leased, finished, gone) is left alone, and so
  is a ready job asked to run now: a page applied twice across a take-over
  changes nothing twice (a scheduled job already at its new due time is
  not counted).

  KEYS[1]  schedule    zset  partition -> lower bound of its earliest due ms;
                             partition P is zset KEYS[1]..":"..P and hash
                             KEYS[1]..":"..P..":jobs"; the schedule filter
                             is KEYS[1]..":filter:"..C
  KEYS[2]  ready       zset  id -> due ms
  KEYS[3]  stats       hash  ("scheduled" counts the schedule)
  KEYS[4]  jobs        hash  id -> record of ready, leased and dead jobs
  KEYS[5]  groups      hash  flows and batches (lib/group.lua): a job held
                             until its group settles is left alone

  ARGV[1]  now ms
  ARGV[2]  N (1..1000)
  ARGV[3+3i .. 5+3i]  for job i: id, its schedule partition (0..32767 in
           plain decimal), its new due ms (>= 0; at or before now: ready at
           once)

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
local n = tonumber(ARGV[2])
if not now or not n or n < 1 or n > 1000 or n ~= math.floor(n) or #ARGV ~= 2 + 3 * n then
  return redis.error_reply("ERR dueq bad-args reschedule: expected now, N of 1..1000 and N id/partition/due triples")
end
for i = 0, n - 1 do
  local due = tonumber(ARGV[5 + 3 * i])
  if ARGV[3 + 3 * i] == "" or not is_partition(ARGV[4 + 3 * i]) or not due or due < 0 or due ~= math.floor(due) then
    return redis.error_reply("ERR dueq bad-args reschedule: job " .. i .. " has no id, a bad partition or a bad due ms")
  end
end
local out, leaving, arriving = {}, filter_slots(), filter_slots()
for i = 0, n - 1 do
  local id, partition, due_text = ARGV[3 + 3 * i], ARGV[4 + 3 * i], ARGV[5 + 3 * i]
  local to_ready = tonumber(due_text) <= now
  local key = KEYS[1] .. ":" .. partition
  out[i + 1] = 0
  local current = redis.call("ZSCORE", key, id)
  if current and redis.call("HEXISTS", KEYS[5] .. ":waiting", id) == 1 then
    -- Held for its group: it runs when its children or batch settle.
  elseif current and not to_ready and tonumber(current) == tonumber(due_text) then
    -- Already there: a page applied again, or the walk meeting a job it
    -- moved ahead of itself, changes and counts nothing.
  elseif current then
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
    local record = redis.call("HGET", KEYS[4], id) or ""
    schedule_put(KEYS[1], KEYS[4], partition, id, due_text, record)
    filter_slot_add(arriving, partition, id)
    type_slot_add(arriving, partition, record)
    out[i + 1] = 1
  end
end
schedule_counted_out(KEYS[1], KEYS[3], leaving)
schedule_counted_in(KEYS[1], KEYS[3], arriving)
return out
