--[[
  reclaim: leases whose deadline has passed (the worker died, hung, never
  received the task, or the broker that leased it is gone). A delivery whose
  start the broker recorded (see lib/lost_delivery.lua) counts as a failed
  attempt: the job goes back to ready at once, or to the dead-letter set when
  its attempts are used up (a poison job that keeps killing workers). Any
  other goes back to ready without using an attempt, marked so that its next
  worker announces the start first. A job a user asked to cancel ends
  cancelled.

  KEYS[1]  leased            zset  id -> deadline ms (and an encoding pin at +inf)
  KEYS[2]  ready             zset
  KEYS[3]  dead              zset
  KEYS[4]  stats             hash
  KEYS[5]  jobs              hash
  KEYS[6]  tokens            hash
  KEYS[7]  attempts          hash  id -> failed deliveries
  KEYS[8]  errors            hash
  KEYS[9]  error logs        hash
  KEYS[10] cancel requested  set
  KEYS[11] cancelled         zset  id -> finished ms
  KEYS[12] started           set   leased ids whose start the broker recorded
  KEYS[13] unconfirmed       hash  id -> deliveries that ended unstarted
  KEYS[14] history           hash  id -> finished job's entry (lib/history.lua)
  KEYS[15..17] held, running, parked: per-key turns (lib/keys.lua), as
           nack.lua releases them
  KEYS[18] unique            hash  unique jobs' holds (lib/unique.lua): a job
                                   that dies or ends cancelled lets its unique
                                   key go
  KEYS[19] groups            hash  flows and batches (lib/group.lua): a dead
                                   or cancelled member is counted
  KEYS[20] schedule          zset  where a held job its group releases goes
                                   when it is due later (or the queue is fair)
  KEYS[21] fair              string present while the queue is fair

  ARGV[1]  now ms
  ARGV[2]  limit (1..5000)
  ARGV[3]  retention seconds for a cancelled entry (0 = keep none)
  ARGV[4]  H: 1 keeps a job that ends cancelled in the history hash (the
           queue keeps history; the retention must be > 0), 0 keeps none

  Returns  {requeued, dead, next_deadline, not_counted, released}:
           next_deadline is the earliest lease deadline left, or -1 when
           nothing is leased; not_counted of the requeued went back without
           using an attempt; released is the earliest due ms of a held job
           these outcomes released (lib/group.lua), or -1
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/lost_delivery.lua
--! include lib/encoding_pin.lua
--! include lib/history.lua
--! include lib/keys.lua
--! include lib/unique.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
--! include lib/group.lua
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local retention = tonumber(ARGV[3])
local keep = ARGV[4] == "1"
if not now or not limit or limit < 1 or limit > 5000 or not retention or retention < 0 or #ARGV ~= 4
    or (ARGV[4] ~= "0" and not keep) or (keep and retention == 0) then
  return redis.error_reply("ERR dueq bad-args reclaim: expected now, a limit of 1..5000, a retention and history 0|1")
end
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, limit)
local requeued, dead, cancelled, not_counted = 0, 0, 0, 0
if #ids > 0 then
  redis.call("ZREMRANGEBYRANK", KEYS[1], 0, #ids - 1)
  redis.call("HDEL", KEYS[6], unpack(ids))
end
local reason = "lease expired (worker lost, hung or unreachable)"
local key_state = {held = KEYS[15], running = KEYS[16], parked = KEYS[17], ready = KEYS[2]}
local holds_turns = redis.call("EXISTS", KEYS[15]) == 1
local gone = {}  -- dead, cancelled or vanished: their unique keys go (lib/unique.lua)
local died, died_why, ended_cancelled = {}, {}, {}  -- for their groups (lib/group.lua)
for _, id in ipairs(ids) do
  local waits_again = false
  local record = redis.call("HGET", KEYS[5], id)
  local started = redis.call("SREM", KEYS[12], id) == 1
  local unstarted = nil
  if record and redis.call("SREM", KEYS[10], id) == 1 then
    if keep then
      -- Its worker is not known here, nor when the delivery started.
      redis.call("HSET", KEYS[14], id, history_entry(now, record, "", "", (tonumber(redis.call("HGET", KEYS[7], id)) or 0) + 1,
        redis.call("HGET", KEYS[8], id), redis.call("HGET", KEYS[9], id)))
    end
    for k = 5, 9 do redis.call("HDEL", KEYS[k], id) end
    redis.call("HDEL", KEYS[13], id)
    if retention > 0 then redis.call("ZADD", KEYS[11], now, id) end
    cancelled = cancelled + 1
    ended_cancelled[#ended_cancelled + 1] = id
    record = nil
  elseif record then
    unstarted = unstarted_delivery(KEYS[13], id, started)
  end
  if unstarted then
    append_error_log(KEYS[9], id, "unstarted", unstarted, now, "", reason .. " before a handler was seen to start it")
    redis.call("ZADD", KEYS[2], ARGV[1], id)
    redis.call("HSET", KEYS[8], id, reason .. " before a handler was seen to start it")
    waits_again = true
    requeued = requeued + 1
    not_counted = not_counted + 1
  elseif record then
    local r = job_record_fields(record) or {}
    local attempt = (tonumber(redis.call("HGET", KEYS[7], id)) or 0) + 1  -- the expired delivery
    redis.call("HSET", KEYS[7], id, attempt)
    append_error_log(KEYS[9], id, "attempt", attempt, now, "", reason)
    if attempt >= (tonumber(r[5]) or 1) then
      redis.call("ZADD", KEYS[3], now, id)
      redis.call("HSET", KEYS[8], id, "attempts exhausted (" .. attempt .. "): " .. reason)
      died[#died + 1], died_why[#died + 1] = id, "attempts exhausted (" .. attempt .. "): " .. reason
      dead = dead + 1
    else
      redis.call("ZADD", KEYS[2], ARGV[1], id)
      redis.call("HSET", KEYS[8], id, reason)
      waits_again = true
      requeued = requeued + 1
    end
  end
  if holds_turns then key_release(key_state, id, waits_again) end
  if not waits_again then gone[#gone + 1] = id end
end
unique_release(KEYS[18], gone, "gone")
if requeued > 0 then redis.call("HINCRBY", KEYS[4], "retried", requeued) end
if dead > 0 then redis.call("HINCRBY", KEYS[4], "dead", dead) end
if cancelled > 0 then redis.call("HINCRBY", KEYS[4], "cancelled", cancelled) end
if not_counted > 0 then redis.call("HINCRBY", KEYS[4], "unconfirmed", not_counted) end
local head = leases_after(KEYS[1], "-inf", 1, true)
local next_deadline = -1
if head[2] then next_deadline = tonumber(head[2]) end
local gk = group_keys(KEYS[19], KEYS[20], KEYS[4], KEYS[5], KEYS[3], KEYS[8], KEYS[11], now, retention, KEYS[2], KEYS[21])
group_settle(gk, died, "dead", died_why)
group_settle(gk, ended_cancelled, "cancelled")
return {requeued, dead, next_deadline, not_counted, gk.fired or -1}
