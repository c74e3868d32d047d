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

-- Appends one entry to a job's error log, keeping its last 8 KiB of whole
-- entries. An entry is one line of four tab-separated fields:
--   "attempt N" or "unstarted N", ms, worker, reason
-- with backslash, tab and newline in the worker and the reason escaped as
-- \\, \t and \n (common/job_document.cpp reads it back); worker may be
-- empty (a lease that ran out names none).
local function escape_log_field(text)
  return (string.gsub(text, "[\\\t\n]", {["\\"] = "\\\\", ["\t"] = "\\t", ["\n"] = "\\n"}))
end
local function append_error_log(logs_key, id, kind, n, now, worker, reason)
  local log = (redis.call("HGET", logs_key, id) or "") .. kind .. " " .. n .. "\t" .. now .. "\t"
    .. escape_log_field(worker) .. "\t" .. escape_log_field(reason) .. "\n"
  if #log > 8192 then
    log = string.sub(log, -8192)
    local cut = string.find(log, "\n", 1, true)
    if cut and cut < #log then log = string.sub(log, cut + 1) end
  end
  redis.call("HSET", logs_key, id, log)
end
