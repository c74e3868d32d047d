-- A delivery that ended without a result (its worker was lost, or its lease
-- ran out) is an attempt only if a handler started it, as far as Redis
-- knows: the broker records a start (extend.lua "started") when a worker
-- announces one. Any other delivery may have sat in a dead worker's buffer,
-- in a TASKS frame that never arrived, or in a round reply lost with its
-- leases: it goes back without an attempt, and the job is marked so that
-- its next worker announces the start and waits for the broker before
-- running it (lease.lua returns the mark). A job that kills its worker is
-- then charged on its next delivery, and its never-started neighbours never.
--
-- Returns nil when the delivery counts as an attempt, otherwise how many
-- deliveries of the job have ended unstarted (this one included), at least
-- AT_LEAST when given (lease.lua turns the count into the start check).
local function unstarted_delivery(unconfirmed_key, id, started, at_least)
  if started then return nil end
  local count = redis.call("HINCRBY", unconfirmed_key, id, 1)
  if at_least and count < at_least then
    redis.call("HSET", unconfirmed_key, id, at_least)
    count = at_least
  end
  return count
end

-- Appends one line to a job's error log, keeping its last 8 KiB.
local function append_error_log(logs_key, id, line)
  local log = (redis.call("HGET", logs_key, id) or "") .. line .. "\n"
  if #log > 8192 then log = string.sub(log, -8192) end
  redis.call("HSET", logs_key, id, log)
end
