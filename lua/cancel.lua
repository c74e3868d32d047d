--[[
  cancel: a user cancels a job. A scheduled or ready job ends "cancelled" at
  once. A leased job is marked cancel-requested: the broker tells its worker
  to stop, and the job ends cancelled when that delivery's result or lease
  expiry arrives (nack and reclaim honour the mark). Done, dead or cancelled
  jobs are left alone.

  KEYS[1]  schedule          zset  partition -> lower bound of its earliest
                                    due ms; partition P is zset
                                    KEYS[1]..":"..P and hash
                                    KEYS[1]..":"..P..":jobs"; the schedule
                                    filter is KEYS[1]..":filter:"..C
  KEYS[2]  ready             zset
  KEYS[3]  leased            zset
  KEYS[4]  dead              zset
  KEYS[5]  done              zset
  KEYS[6]  cancelled         zset  id -> finished ms
  KEYS[7]  stats             hash  ("scheduled" counts the schedule)
  KEYS[8]  jobs              hash
  KEYS[9]  tokens            hash
  KEYS[10] attempts          hash
  KEYS[11] errors            hash
  KEYS[12] error logs        hash
  KEYS[13] cancel requested  set
  KEYS[14] unconfirmed       hash  id -> deliveries that ended unstarted
  KEYS[15] history           hash  id -> finished job's entry (lib/history.lua)
  KEYS[16..18] held, running, parked: per-key turns (lib/keys.lua); a job
           of an ordered queue waiting for a retry holds its key's, and
           releases it here
  KEYS[19] unique            hash  unique jobs' holds (lib/unique.lua): a job
                                   cancelled lets its unique key go
  KEYS[20] snoozes           hash  id -> times the job snoozed (lua/nack.lua)
  KEYS[21] groups            hash  flows and batches (lib/group.lua): a
                                   cancelled member is counted (and may fail
                                   its parent or release its group's held
                                   jobs); a cancelled flow parent cancels its
                                   descendants still scheduled or ready
  KEYS[22] fair              string present while the queue is fair (a held
                                   job released waits for promote's tag)

  ARGV[1]  now ms
  ARGV[2]  job id
  ARGV[3]  retention seconds for the cancelled entry (0 = keep none)
  ARGV[4]  the job's schedule partition (0..32767 in plain decimal)
  ARGV[5]  H: 1 keeps a job cancelled here in the history hash (the queue
           keeps history; the retention must be > 0), 0 keeps none

  Returns  {status, token, released}: status 1 cancelled, 2 cancel
           requested (leased; token = the delivery to stop, as stored), 0
           not found, -1 already finished (done, dead or cancelled);
           released = the earliest due ms of a held job the cancel released
           (lib/group.lua), or -1
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
--! include lib/history.lua
--! include lib/keys.lua
--! include lib/unique.lua
--! include lib/group.lua
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[3])
local keep = ARGV[5] == "1"
if not now or not retention or retention < 0 or not ARGV[2] or ARGV[2] == "" or #ARGV ~= 5
    or not is_partition(ARGV[4]) or (ARGV[5] ~= "0" and not keep) or (keep and retention == 0) then
  return redis.error_reply("ERR dueq bad-args cancel: expected now, id, retention, partition and history 0|1")
end
local gk = group_keys(KEYS[21], KEYS[1], KEYS[7], KEYS[8], KEYS[4], KEYS[11], KEYS[6], now, retention, KEYS[2], KEYS[22])
local cancel_waiting  -- defined below: a parent's waiting descendants go with it

-- A flow parent ID cancelled: its group is, and so are its members still
-- scheduled or ready (a member already leased runs on and settles into the
-- cancelled group, which counts nothing more). A batch's callback cancelled
-- is only no longer held: its batch goes on without it.
local function cancel_held(id)
  local held = group_held_entry(gk, id)
  if not held then return end
  redis.call("HDEL", gk.waiting, id)
  if held.role ~= "p" or group_get(gk, held.group, "state") ~= "w" then return end
  group_mark_settled(gk, held.group, "c")
  for _, member in ipairs(redis.call("SMEMBERS", group_members_key(gk, held.group))) do
    local entry = redis.call("HGET", gk.of, member)
    if entry then cancel_waiting(member, string.format("%d", tonumber(string.sub(entry, 2, 6)))) end
  end
end

-- Cancels job ID of PARTITION if it is scheduled or ready: 1, else 0.
cancel_waiting = function(id, partition)
  local key = KEYS[1] .. ":" .. partition
  local record = nil
  if redis.call("ZREM", key, id) == 1 then
    record = redis.call("HGET", key .. ":jobs", id)
    redis.call("HDEL", key .. ":jobs", id)
    local slots = filter_slots()
    filter_slot_add(slots, partition, id)
    schedule_counted_out(KEYS[1], KEYS[7], slots)
    -- An emptied partition leaves the index; otherwise its entry stays a
    -- lower bound, which promote corrects when it gets there.
    if redis.call("EXISTS", key) == 0 then redis.call("ZREM", KEYS[1], partition) end
  elseif redis.call("ZREM", KEYS[2], id) == 0 then
    return 0
  end
  if keep then
    -- Never ran now; the attempts hash counts the deliveries that failed.
    redis.call("HSET", KEYS[15], id, history_entry(now, record or redis.call("HGET", KEYS[8], id) or "", "", "",
      tonumber(redis.call("HGET", KEYS[10], id)) or 0, redis.call("HGET", KEYS[11], id), redis.call("HGET", KEYS[12], id)))
  end
  for k = 8, 12 do redis.call("HDEL", KEYS[k], id) end
  redis.call("HDEL", KEYS[14], id)
  redis.call("HDEL", KEYS[20], id)
  if redis.call("EXISTS", KEYS[16]) == 1 then
    key_release({held = KEYS[16], running = KEYS[17], parked = KEYS[18], ready = KEYS[2]}, id, false)
  end
  unique_release(KEYS[19], {id}, "gone")
  if retention > 0 then redis.call("ZADD", KEYS[6], now, id) end
  redis.call("HINCRBY", KEYS[7], "cancelled", 1)
  cancel_held(id)
  group_member_settled(gk, id, "cancelled", "")
  return 1
end

local id = ARGV[2]
if redis.call("ZSCORE", KEYS[3], id) then
  redis.call("SADD", KEYS[13], id)
  -- As text: a 64-bit token does not survive a Lua number.
  return {2, redis.call("HGET", KEYS[9], id) or "0", -1}
end
if cancel_waiting(id, ARGV[4]) == 0 then
  for k = 4, 6 do
    if redis.call("ZSCORE", KEYS[k], id) then return {-1, 0, -1} end
  end
  return {0, 0, -1}
end
return {1, 0, gk.fired or -1}
