--[[
  repair: remove state-set entries whose job record no longer exists. Such an
  entry can never be delivered (lease and promote drop it) and only skews
  the counts, so removing it is always safe. Ids that do have a record, in
  the jobs hash or in their schedule partition, are left alone.

  KEYS[1]  schedule    zset  partition -> lower bound of its earliest due ms;
                             partition P is zset KEYS[1]..":"..P and hash
                             KEYS[1]..":"..P..":jobs"; the schedule filter
                             is KEYS[1]..":filter:"..C
  KEYS[2]  ready       zset
  KEYS[3]  leased      zset
  KEYS[4]  dead        zset
  KEYS[5]  jobs        hash
  KEYS[6]  stats       hash  ("scheduled" is lowered by schedule entries removed)

  ARGV[1..2N] N ids (1..500), each followed by its schedule partition
           (0..32767 in plain decimal)

  Returns  array of the ids whose dangling entries were removed
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
local bad_args = id_partition_pairs_problem("repair")
if bad_args then return bad_args end
local out = {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local key = KEYS[1] .. ":" .. ARGV[i + 1]
  if redis.call("HEXISTS", KEYS[5], id) == 0 and redis.call("HEXISTS", key .. ":jobs", id) == 0 then
    local from_schedule = redis.call("ZREM", key, id)
    if from_schedule > 0 then
      local slots = filter_slots()
      filter_slot_add(slots, ARGV[i + 1], id)
      schedule_counted_out(KEYS[1], KEYS[6], slots)
      if redis.call("EXISTS", key) == 0 then redis.call("ZREM", KEYS[1], ARGV[i + 1]) end
    end
    local removed = from_schedule + redis.call("ZREM", KEYS[2], id) + redis.call("ZREM", KEYS[3], id)
      + redis.call("ZREM", KEYS[4], id)
    if removed > 0 then out[#out + 1] = id end
  end
end
return out
