--[[
  nack: a delivery failed. The job goes back to the schedule (exponential
  backoff with the jitter the broker drew), back to ready at once, or to the
  dead-letter set when it asks for no retry or its attempts are used up. The
  reason is kept as the last error and appended to the job's error log.
  A stale token changes nothing and is counted as a stale ack. A job a user
  asked to cancel while it was leased (mark "cx") ends cancelled whatever
  the mode.

  KEYS[1]  scheduled   zset
  KEYS[2]  ready       zset
  KEYS[3]  leased      zset
  KEYS[4]  dead        zset  id -> time it died (ms)
  KEYS[5]  stats       hash
  KEYS[6]  job prefix

  ARGV[1]  now ms
  ARGV[2]  backoff base ms (>= 0), unless the job has its own ("bb")
  ARGV[3]  backoff cap ms (>= base), unless the job has its own ("bc")
  ARGV[4]  retention seconds for a cancelled record (0 = delete at once)
  ARGV[5]  N (1..5000)
  ARGV[6+4i .. 9+4i] for job i: id, token, mode, reason
           mode "retry": back to the schedule after
                 jitter * min(cap, base * 2^(attempt-1)) ms (full jitter);
           mode "now": back to ready at once (worker lost; still an attempt);
           mode "dead": no retry (bad payload, handler said final);
           mode "return": back to ready at once, the attempt not counted
                 (a draining worker handing back a job it never started);
           mode "cancel": the handler stopped because the job was cancelled
  ARGV[6+4N+i] for job i: jitter in [0, 1], drawn by the broker

  Returns  flat array, 2 values per job: status, due ms
           status 0 stale, 1 retried (due ms = when), 2 dead (due ms = 0),
           3 cancelled
  Errors   "ERR dueq bad-args <what>"
]]
local now = tonumber(ARGV[1])
local base = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local retention = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
if not now or not base or base < 0 or not cap or cap < base or not retention or retention < 0 or not n or n < 1
    or n > 5000 or #ARGV ~= 5 + 5 * n then
  return redis.error_reply("ERR dueq bad-args nack: expected now, base, cap, retention, N, 4 values per job and N jitters")
end
local modes = {retry = true, now = true, dead = true, ["return"] = true, cancel = true}
local jitter_at = 5 + 4 * n
for i = 0, n - 1 do
  local mode = ARGV[8 + 4 * i]
  local jitter = tonumber(ARGV[jitter_at + 1 + i])
  if not modes[mode] or not jitter or jitter < 0 or jitter > 1 then
    return redis.error_reply("ERR dueq bad-args nack: job " .. i .. " has a bad mode or jitter")
  end
end

local out = {}
local retried, dead, stale, cancelled = 0, 0, 0, 0
for i = 0, n - 1 do
  local id = ARGV[6 + 4 * i]
  local mode = ARGV[8 + 4 * i]
  local reason = ARGV[9 + 4 * i]
  local key = KEYS[6] .. id
  local f = redis.call("HMGET", key, "k", "s", "a", "m", "el", "cx", "bb", "bc")
  if f[1] ~= ARGV[7 + 4 * i] or f[2] ~= "leased" then
    stale = stale + 1
    out[#out + 1] = 0
    out[#out + 1] = 0
  else
    local attempt = tonumber(f[3])
    local log = (f[5] or "") .. "attempt " .. attempt .. ": " .. reason .. "\n"
    if #log > 8192 then log = string.sub(log, -8192) end
    redis.call("ZREM", KEYS[3], id)
    if f[6] or mode == "cancel" then
      if retention > 0 then
        redis.call("HSET", key, "s", "cancelled", "e", "cancelled by a user", "el", log, "f", now)
        redis.call("HDEL", key, "p")
        redis.call("EXPIRE", key, retention)
      else
        redis.call("DEL", key)
      end
      cancelled = cancelled + 1
      out[#out + 1] = 3
      out[#out + 1] = 0
    elseif mode == "return" then
      redis.call("ZADD", KEYS[2], ARGV[1], id)
      redis.call("HSET", key, "s", "ready", "a", attempt - 1)
      retried = retried + 1
      out[#out + 1] = 1
      out[#out + 1] = now
    elseif mode == "dead" or attempt >= tonumber(f[4]) then
      local why = reason
      if mode ~= "dead" then why = "attempts exhausted (" .. attempt .. "): " .. reason end
      redis.call("ZADD", KEYS[4], now, id)
      redis.call("HSET", key, "s", "dead", "e", why, "el", log, "f", now)
      dead = dead + 1
      out[#out + 1] = 2
      out[#out + 1] = 0
    else
      local due = now
      if mode == "retry" then
        local job_base = tonumber(f[7]) or base
        local job_cap = math.max(tonumber(f[8]) or cap, job_base)
        local backoff = math.min(job_cap, job_base * 2 ^ (attempt - 1))
        due = now + math.floor(tonumber(ARGV[jitter_at + 1 + i]) * backoff)
      end
      if due <= now then
        redis.call("ZADD", KEYS[2], due, id)
        redis.call("HSET", key, "s", "ready", "e", reason, "el", log)
      else
        redis.call("ZADD", KEYS[1], due, id)
        redis.call("HSET", key, "s", "scheduled", "e", reason, "el", log)
      end
      retried = retried + 1
      out[#out + 1] = 1
      out[#out + 1] = due
    end
  end
end
if retried > 0 then redis.call("HINCRBY", KEYS[5], "retried", retried) end
if dead > 0 then redis.call("HINCRBY", KEYS[5], "dead", dead) end
if stale > 0 then redis.call("HINCRBY", KEYS[5], "stale_acks", stale) end
if cancelled > 0 then redis.call("HINCRBY", KEYS[5], "cancelled", cancelled) end
return out
