-- A delivery that ended without a result (its worker was lost, or its lease
-- ran out) is an attempt only if a worker confirmed receiving it: a TASKS
-- frame that never arrived, a round reply lost with its leases or a broker
-- that died between lease and dispatch must not use up a job's attempts.
-- Unconfirmed deliveries are counted apart, and past LIMIT of them the next
-- one counts after all: a job that kills its worker before the worker's first
-- heartbeat still runs out of attempts instead of looping.
--
-- Returns nil when the delivery counts as an attempt, otherwise how many
-- unconfirmed deliveries the job has had (this one included).
local function unconfirmed_delivery(unconfirmed_key, id, received, limit)
  if received then return nil end
  local unconfirmed = redis.call("HINCRBY", unconfirmed_key, id, 1)
  if unconfirmed > limit then return nil end
  return unconfirmed
end

-- Appends one line to a job's error log, keeping its last 8 KiB.
local function append_error_log(logs_key, id, line)
  local log = (redis.call("HGET", logs_key, id) or "") .. line .. "\n"
  if #log > 8192 then log = string.sub(log, -8192) end
  redis.call("HSET", logs_key, id, log)
end
