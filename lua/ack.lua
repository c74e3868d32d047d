--[[
  ack: mark leased jobs done. Only the current delivery may complete a job:
  an ack whose token is not the job's current token, or for a job that is no
  longer leased, changes nothing and is counted as a stale ack. A done job's
  data is deleted; its id stays in the done set for the retention period so
  that `dueq job` can report it and a producer's retry is still a duplicate.

  KEYS[1]  leased            zset
  KEYS[2]  stats             hash
  KEYS[3]  jobs              hash
  KEYS[4]  tokens            hash
  KEYS[5]  attempts          hash
  KEYS[6]  errors            hash
  KEYS[7]  error logs        hash
  KEYS[8]  cancel requested  set
  KEYS[9]  done              zset  id -> finished ms
  KEYS[10] started           set   leased ids whose start the broker recorded
  KEYS[11] unconfirmed       hash  id -> deliveries that ended unstarted
  KEYS[12] history           hash  id -> finished job's entry (lib/history.lua)
  KEYS[13..16] held, running, parked, ready: per-key turns the finished
           jobs release (lib/keys.lua)
  KEYS[17] unique            hash  unique jobs' holds (lib/unique.lua): a job
                                   done lets its unique key go (a period's stays)
  KEYS[18] snoozes           hash  id -> times the job snoozed (lua/nack.lua)
  KEYS[19] results           hash  id -> what its handler returned, kept
                                   while its done entry is (lua/sweep.lua)
  KEYS[20] groups            hash  flows and batches (lib/group.lua): a done
                                   member is counted, and the last one of a
                                   group releases its held jobs
  KEYS[21..23] schedule, dead, cancelled: where a held job goes when its
           group settles (released: to ready, KEYS[16], when its due time
           has passed, else it stays in the schedule at it; dead when a
           child's failure fails it; cancelled: a batch's success callback
           when a member failed)
  KEYS[24] fair              string present while the queue is fair: a held
                                   job released goes through the schedule
                                   (promote gives its tag), not to ready

  ARGV[1]  now ms
  ARGV[2]  retention seconds for the done entry (0 = keep none)
  ARGV[3]  H: 1 keeps each done job's entry in the history hash (the queue
           keeps history; its sweep trims it, so the retention must be > 0),
           0 keeps none
  ARGV[4]  N (1..5000)
  ARGV[5+Si ..]  for job i, S = 5 values with H = 1, else 3: id, token,
           result ("" for none; kept only with a retention > 0), and with
           H = 1 the ms its delivery started ("" when unknown) and the
           worker that ran it

  Returns  array of N + 1 integers: per job 1 applied, 0 stale; then the
           earliest due ms of a held job these acks released, or -1
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/chunked.lua
--! include lib/history.lua
--! include lib/keys.lua
--! include lib/unique.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
--! include lib/group.lua
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local keep = ARGV[3] == "1"
local n = tonumber(ARGV[4])
local stride = keep and 5 or 3
if not now or not retention or retention < 0 or (ARGV[3] ~= "0" and not keep) or (keep and retention == 0) or not n or n < 1 or n > 5000
    or #ARGV ~= 4 + stride * n then
  return redis.error_reply("ERR dueq bad-args ack: expected now, retention, history 0|1, N and N jobs of 3 values (5 with history)")
end
local ids = {}
for i = 0, n - 1 do ids[i + 1] = ARGV[5 + stride * i] end
-- A job has a token exactly while it is leased (every script that ends a
-- lease deletes it), so the token alone proves the lease.
local tokens = redis.call("HMGET", KEYS[4], unpack(ids))
-- Appended through a counter: Lua 5.1's # is a search, and this runs per job.
local out, finished, at, seen, done = {}, {}, {}, {}, 0
for i = 1, n do
  local id = ids[i]
  if tokens[i] == ARGV[6 + stride * (i - 1)] and not seen[id] then
    seen[id] = true
    done = done + 1
    finished[done] = id
    at[done] = i - 1
    out[i] = 1
  else
    out[i] = 0
  end
end
-- Read before the deletes below: what the history entries keep.
local function keep_history()
  local records = redis.call("HMGET", KEYS[3], unpack(finished))
  local attempts, errors, logs = history_read(KEYS[5], finished), history_read(KEYS[6], finished),
    history_read(KEYS[7], finished)
  local entries = {}
  for j = 1, done do
    local b = 5 + stride * at[j]
    entries[2 * j - 1] = finished[j]
    entries[2 * j] = history_entry(now, records[j] or "", ARGV[b + 3], ARGV[b + 4], (tonumber(attempts[j]) or 0) + 1,
      errors[j], logs[j])
  end
  call_in_chunks("HSET", KEYS[12], entries, 2000)
end

if done > 0 then
  if keep then keep_history() end
  redis.call("ZREM", KEYS[1], unpack(finished))
  redis.call("HDEL", KEYS[3], unpack(finished))
  redis.call("HDEL", KEYS[4], unpack(finished))
  -- Most jobs never failed, were never cancelled and finished before a
  -- heartbeat listed them, so these keys are often absent: an EXISTS spares
  -- Redis turning every id into an argument for nothing.
  for _, k in ipairs({5, 6, 7, 11, 18}) do
    if redis.call("EXISTS", KEYS[k]) == 1 then redis.call("HDEL", KEYS[k], unpack(finished)) end
  end
  for _, k in ipairs({8, 10}) do
    if redis.call("EXISTS", KEYS[k]) == 1 then redis.call("SREM", KEYS[k], unpack(finished)) end
  end
  if retention > 0 then
    for i = 1, done, 1000 do
      local args, k = {}, 0
      for j = i, math.min(i + 999, done) do
        args[k + 1], args[k + 2] = ARGV[1], finished[j]
        k = k + 2
      end
      redis.call("ZADD", KEYS[9], unpack(args))
    end
    local results, r = {}, 0
    for j = 1, done do
      local result = ARGV[7 + stride * at[j]]
      if result ~= "" then
        results[r + 1], results[r + 2] = finished[j], result
        r = r + 2
      end
    end
    if r > 0 then call_in_chunks("HSET", KEYS[19], results, 2000) end
  end
  redis.call("HINCRBY", KEYS[2], "done", done)
  key_release_all({held = KEYS[13], running = KEYS[14], parked = KEYS[15], ready = KEYS[16]}, finished)
  unique_release(KEYS[17], finished, "done")
end
if done < n then redis.call("HINCRBY", KEYS[2], "stale_acks", n - done) end
local gk = group_keys(KEYS[20], KEYS[21], KEYS[2], KEYS[3], KEYS[22], KEYS[6], KEYS[23], now, retention, KEYS[16], KEYS[24])
if done > 0 then group_settle(gk, finished, "done") end
out[n + 1] = gk.fired or -1
return out
