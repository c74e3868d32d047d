--[[
  nack: a delivery failed. The job goes back to the schedule (exponential
  backoff with the jitter the broker drew), back to ready at once, or to the
  dead-letter set when it asks for no retry or its attempts are used up. The
  reason is kept as the last error and appended to the job's error log.
  A stale token changes nothing and is counted as a stale ack. A job a user
  asked to cancel while it was leased ends cancelled whatever the mode.

  KEYS[1]  schedule          zset  partition -> lower bound of its earliest
                                    due ms; a retried job's id and record go
                                    to partition P: zset KEYS[1]..":"..P and
                                    hash KEYS[1]..":"..P..":jobs", counted
                                    by the schedule filter KEYS[1]..":filter:"..C
  KEYS[2]  ready             zset
  KEYS[3]  leased            zset
  KEYS[4]  dead              zset  id -> time it died (ms)
  KEYS[5]  stats             hash  ("scheduled" counts the schedule)
  KEYS[6]  jobs              hash  (max attempts and backoff are read from
                                    the record)
  KEYS[7]  tokens            hash
  KEYS[8]  attempts          hash  id -> failed deliveries
  KEYS[9]  errors            hash
  KEYS[10] error logs        hash
  KEYS[11] cancel requested  set
  KEYS[12] cancelled         zset  id -> finished ms
  KEYS[13] started           set   leased ids whose start the broker recorded
  KEYS[14] unconfirmed       hash  id -> deliveries that ended unstarted (the
                                    next worker must announce the start)
  KEYS[15] history           hash  id -> finished job's entry (lib/history.lua)
  KEYS[16..18] held, running, parked: per-key turns (lib/keys.lua): a job
           that ends releases its key's turn, and so does one that goes
           back to wait unless its queue is ordered
  KEYS[19] unique            hash  unique jobs' holds (lib/unique.lua): a job
                                   that dies or ends cancelled lets its unique
                                   key go
  KEYS[20] snoozes           hash  id -> times the job snoozed (kept while it
                                   is dead, deleted when it ends otherwise)
  KEYS[21] groups            hash  flows and batches (lib/group.lua): a dead
                                   or cancelled member is counted, and may
                                   fail its parent or release its group's
                                   held jobs
  KEYS[22] fair              string present while the queue is fair (a held
                                   job released waits for promote's tag)

  ARGV[1]  now ms
  ARGV[2]  backoff base ms (>= 0), unless the job has its own
  ARGV[3]  backoff cap ms (>= base), unless the job has its own
  ARGV[4]  retention seconds for a cancelled entry (0 = keep none)
  ARGV[5]  N (1..5000)
  ARGV[6]  the queue's most snoozes per job (0 = no limit)
  ARGV[7+7i .. 13+7i] for job i: id, token, mode, reason, schedule
           partition (0..32767 in plain decimal), the worker that held
           it ("" when none is known), written with the reason to the
           job's error log, and the snooze delay ms (mode "snooze": 0..10
           years; "0" for every other mode)
           mode "retry": back to the schedule after
                 jitter * min(cap, base * 2^(attempt-1)) ms (full jitter);
           mode "now": back to ready at once (worker lost while running the
                 job, as the broker saw it start: an attempt);
           mode "lost": back to ready at once (worker lost; the broker did
                 not see the job start): an attempt only if Redis holds its
                 start (lib/lost_delivery.lua);
           mode "lost_beside": as "lost", but its worker held other jobs
                 beside it: a start Redis holds (recorded by an earlier
                 broker) is no attempt either, and the next delivery runs
                 alone among announced ones (start check 2);
           mode "shared": back to ready at once, no attempt though Redis
                 holds its start (its worker died running several announced
                 jobs: which one killed it is unknown); its next delivery
                 runs alone among announced ones (lease.lua start check 2);
           mode "dead": no retry (bad payload, handler said final);
           mode "return": back to ready at once, the attempt not counted
                 (a draining worker handing back a job it never started);
           mode "cancel": the handler stopped because the job was cancelled;
           mode "snooze": the handler asked to run again after the delay:
                 back to the schedule (ready with 0), no attempt used and
                 nothing written to the error log; the job's snoozes are
                 counted (KEYS[20]), and one past the queue's most goes
                 dead with the reason "snoozed too often (N times)";
           mode "expired": not started by its start-by deadline (the broker
                 found it past it when it leased it, or the worker when it
                 would have started it): dead with the reason, no attempt
                 used, counted as expired
  ARGV[7+7N+i] for job i: jitter in [0, 1], drawn by the broker
  ARGV[7+8N]  H: 1 keeps a job that ends cancelled in the history hash (the
           queue keeps history and the retention is > 0), 0 keeps none
  ARGV[8+8N+i] with H = 1, for job i: the ms its delivery started ("" when
           unknown)

  Returns  flat array, 2 values per job: status, due ms
           status 0 stale, 1 retried or snoozed (due ms = when), 2 dead
           (due ms = 0), 3 cancelled; then one more: the earliest due ms of
           a held job these outcomes released (lib/group.lua), or -1
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
--! include lib/lost_delivery.lua
--! include lib/history.lua
--! include lib/keys.lua
--! include lib/unique.lua
--! include lib/group.lua
local now = tonumber(ARGV[1])
local base = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local retention = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local max_snoozes = tonumber(ARGV[6])
local keep = n and ARGV[7 + 8 * n] == "1"
if not now or not base or base < 0 or not cap or cap < base or not retention or retention < 0
    or not max_snoozes or max_snoozes < 0 or max_snoozes ~= math.floor(max_snoozes)
    or not n or n < 1 or n > 5000 or (ARGV[7 + 8 * n] ~= "0" and not keep) or (keep and retention == 0)
    or #ARGV ~= 7 + (keep and 9 or 8) * n then
  return redis.error_reply("ERR dueq bad-args nack: expected now, base, cap, retention, N, max snoozes, 7 values per job, N jitters, history 0|1 (and N starts)")
end
-- Job i's value k (0..6: id, token, mode, reason, partition, worker, snooze ms).
local function job_arg(i, k) return ARGV[7 + 7 * i + k] end
local modes = {retry = true, now = true, lost = true, lost_beside = true, shared = true, dead = true, ["return"] = true,
               cancel = true, snooze = true, expired = true}
local jitter_at = 6 + 7 * n
local max_delay = 10 * 366 * 86400000
for i = 0, n - 1 do
  local mode = job_arg(i, 2)
  local jitter = tonumber(ARGV[jitter_at + 1 + i])
  local delay = tonumber(job_arg(i, 6))
  if not modes[mode] or not jitter or jitter < 0 or jitter > 1 or not is_partition(job_arg(i, 4))
      or not delay or delay < 0 or delay > max_delay or delay ~= math.floor(delay) then
    return redis.error_reply("ERR dueq bad-args nack: job " .. i .. " has a bad mode, partition, jitter or snooze delay")
  end
end

local scheduled_slots = filter_slots()
-- A job back in line at DUE: ready when it is due now, else in its
-- schedule partition (counted by the filter once the loop is done).
local function put_back(i, id, due, record)
  if due <= now then
    redis.call("ZADD", KEYS[2], due, id)
    return
  end
  local partition = job_arg(i, 4)
  schedule_put(KEYS[1], KEYS[6], partition, id, string.format("%d", due), record)
  filter_slot_add(scheduled_slots, partition, id)
  type_slot_add(scheduled_slots, partition, record)
end

local out = {}
local retried, dead, stale, cancelled, not_counted, snoozed, expired = 0, 0, 0, 0, 0, 0, 0
local key_state = {held = KEYS[16], running = KEYS[17], parked = KEYS[18], ready = KEYS[2]}
local holds_turns = redis.call("EXISTS", KEYS[16]) == 1  -- one look for a queue without keys
local gone = {}  -- dead or cancelled: their unique keys go (lib/unique.lua)
local died, died_why, ended_cancelled = {}, {}, {}  -- for their groups (lib/group.lua)
-- A job to the dead letters with WHY: its key's turn and its unique key go.
local function to_dead(id, why)
  died[#died + 1], died_why[#died + 1] = id, why
  redis.call("ZADD", KEYS[4], now, id)
  redis.call("HSET", KEYS[9], id, why)
  if holds_turns then key_release(key_state, id, false) end
  gone[#gone + 1] = id
  dead = dead + 1
  out[#out + 1] = 2
  out[#out + 1] = 0
end
for i = 0, n - 1 do
  local id = job_arg(i, 0)
  local mode = job_arg(i, 2)
  local reason = job_arg(i, 3)
  local worker = job_arg(i, 5)
  local record = redis.call("HGET", KEYS[6], id)
  if not record or redis.call("HGET", KEYS[7], id) ~= job_arg(i, 1) or not redis.call("ZSCORE", KEYS[3], id) then
    stale = stale + 1
    out[#out + 1] = 0
    out[#out + 1] = 0
  else
    -- A record that cannot be read makes the job dead (kept for a look),
    -- never lost: max attempts 1.
    local r = job_record_fields(record) or {}
    local max_attempts = tonumber(r[5]) or 1
    -- The attempts hash counts failed deliveries; this one is the next.
    local attempt = (tonumber(redis.call("HGET", KEYS[8], id)) or 0) + 1
    redis.call("ZREM", KEYS[3], id)
    redis.call("HDEL", KEYS[7], id)
    local started = redis.call("SREM", KEYS[13], id) == 1
    local unstarted = nil
    if mode == "lost" then unstarted = unstarted_delivery(KEYS[14], id, started) end
    if mode == "lost_beside" then unstarted = unstarted_delivery(KEYS[14], id, false, started and 2 or nil) end
    if mode == "shared" then unstarted = unstarted_delivery(KEYS[14], id, false, 2) end
    if mode == "cancel" or redis.call("SREM", KEYS[11], id) == 1 then
      if keep then
        redis.call("HSET", KEYS[15], id, history_entry(now, record, ARGV[8 + 8 * n + i], worker, attempt,
          redis.call("HGET", KEYS[9], id), redis.call("HGET", KEYS[10], id)))
      end
      for k = 6, 10 do redis.call("HDEL", KEYS[k], id) end
      redis.call("HDEL", KEYS[14], id)
      redis.call("HDEL", KEYS[20], id)
      if retention > 0 then redis.call("ZADD", KEYS[12], now, id) end
      if holds_turns then key_release(key_state, id, false) end
      gone[#gone + 1] = id
      ended_cancelled[#ended_cancelled + 1] = id
      cancelled = cancelled + 1
      out[#out + 1] = 3
      out[#out + 1] = 0
    elseif mode == "return" then
      redis.call("ZADD", KEYS[2], ARGV[1], id)  -- not counted: the failed attempts stay as they were
      if holds_turns then key_release(key_state, id, true) end
      retried = retried + 1
      out[#out + 1] = 1
      out[#out + 1] = now
    elseif mode == "expired" then
      to_dead(id, reason)
      expired = expired + 1
    -- A snooze is counted once: here when the queue has a most (one past
    -- it dies), in the branch below when it has none.
    elseif mode == "snooze" and max_snoozes > 0 and redis.call("HINCRBY", KEYS[20], id, 1) > max_snoozes then
      local why = "snoozed too often (" .. max_snoozes .. " times, the queue's max_snoozes): " .. reason
      append_error_log(KEYS[10], id, "attempt", attempt, now, worker, why)
      to_dead(id, why)
    elseif mode == "snooze" then
      -- Not an attempt: the attempts and the error log stay as they were.
      if max_snoozes == 0 then redis.call("HINCRBY", KEYS[20], id, 1) end
      local due = now + tonumber(job_arg(i, 6))
      put_back(i, id, due, record)
      if holds_turns then key_release(key_state, id, true) end
      snoozed = snoozed + 1
      out[#out + 1] = 1
      out[#out + 1] = due
    elseif unstarted then
      append_error_log(KEYS[10], id, "unstarted", unstarted, now, worker, reason)
      redis.call("ZADD", KEYS[2], ARGV[1], id)
      redis.call("HSET", KEYS[9], id, reason)
      if holds_turns then key_release(key_state, id, true) end
      retried = retried + 1
      not_counted = not_counted + 1
      out[#out + 1] = 1
      out[#out + 1] = now
    else
      redis.call("HSET", KEYS[8], id, attempt)
      append_error_log(KEYS[10], id, "attempt", attempt, now, worker, reason)
      if mode == "dead" or attempt >= max_attempts then
        local why = reason
        if mode ~= "dead" then why = "attempts exhausted (" .. attempt .. "): " .. reason end
        to_dead(id, why)
      else
        local due = now
        if mode == "retry" then
          local job_base = tonumber(r[7]) or 0
          if job_base == 0 then job_base = base end
          local job_cap = tonumber(r[8]) or 0
          if job_cap == 0 then job_cap = cap end
          local backoff = math.min(math.max(job_cap, job_base), job_base * 2 ^ (attempt - 1))
          due = now + math.floor(tonumber(ARGV[jitter_at + 1 + i]) * backoff)
        end
        put_back(i, id, due, record)
        redis.call("HSET", KEYS[9], id, reason)
        if holds_turns then key_release(key_state, id, true) end
        retried = retried + 1
        out[#out + 1] = 1
        out[#out + 1] = due
      end
    end
  end
end
schedule_counted_in(KEYS[1], KEYS[5], scheduled_slots)
unique_release(KEYS[19], gone, "gone")
if retried > 0 then redis.call("HINCRBY", KEYS[5], "retried", retried) end
if dead > 0 then redis.call("HINCRBY", KEYS[5], "dead", dead) end
if stale > 0 then redis.call("HINCRBY", KEYS[5], "stale_acks", stale) end
if cancelled > 0 then redis.call("HINCRBY", KEYS[5], "cancelled", cancelled) end
if not_counted > 0 then redis.call("HINCRBY", KEYS[5], "unconfirmed", not_counted) end
if snoozed > 0 then redis.call("HINCRBY", KEYS[5], "snoozed", snoozed) end
if expired > 0 then redis.call("HINCRBY", KEYS[5], "expired", expired) end
local gk = group_keys(KEYS[21], KEYS[1], KEYS[5], KEYS[6], KEYS[4], KEYS[9], KEYS[12], now, retention, KEYS[2], KEYS[22])
group_settle(gk, died, "dead", died_why)
group_settle(gk, ended_cancelled, "cancelled")
out[#out + 1] = gk.fired or -1
return out
