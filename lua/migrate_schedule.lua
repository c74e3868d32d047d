--[[
  migrate_schedule: move jobs from the single schedule sorted set of earlier
  dueq versions (records in the jobs hash) into the partitioned schedule.
  The broker runs it at start, in slices, until the old set is gone, so an
  upgrade keeps every scheduled job. Ids no longer in the old set are
  skipped; an id there without a record is dropped (it could never run).

  KEYS[1]  legacy schedule  zset  id -> due ms
  KEYS[2]  schedule         zset  partition -> lower bound of its earliest due
                                  ms; partition P is zset KEYS[2]..":"..P and
                                  hash KEYS[2]..":"..P..":jobs"; the schedule
                                  filter is KEYS[2]..":filter:"..C
  KEYS[3]  jobs             hash  id -> job record
  KEYS[4]  stats            hash  ("scheduled" counts the schedule)

  ARGV[1..2N] N ids (1..500), each followed by its schedule partition
           (0..32767 in plain decimal)

  Returns  the number of jobs moved
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
--! include lib/schedule_put.lua
--! include lib/schedule_filter.lua
local bad_args = id_partition_pairs_problem("migrate_schedule")
if bad_args then return bad_args end
local moved, moved_slots = 0, filter_slots()
for i = 1, #ARGV, 2 do
  local id, partition = ARGV[i], ARGV[i + 1]
  local due = redis.call("ZSCORE", KEYS[1], id)
  if due then
    redis.call("ZREM", KEYS[1], id)
    local record = redis.call("HGET", KEYS[3], id)
    if record then
      schedule_put(KEYS[2], KEYS[3], partition, id, due, record)
      moved = moved + 1
      filter_slot_add(moved_slots, partition, id)
      type_slot_add(moved_slots, partition, record)
    end
  end
end
schedule_counted_in(KEYS[2], KEYS[4], moved_slots)
return moved
