-- history_entry(now, record, started, worker, attempt, last_error, error_log):
-- a job's document as kept in the queue's history hash (id -> entry) when
-- it finished at `now` while its queue keeps history: one msgpack stream of
-- the job record (as the jobs hash held it), how long before `now` it
-- started (an integer; "" when unknown: `started` is the start ms as text),
-- the worker ("" when none ran it), the attempt it ended on (0 when none
-- ran), and only when it has them its last error and its error log. Small
-- on purpose: docs/jobs.md states its bytes. Reader: show.lua.
local function history_entry(now, record, started, worker, attempt, last_error, error_log)
  local ran_for = ""
  if started and started ~= "" and tonumber(started) then ran_for = now - tonumber(started) end
  if (last_error and last_error ~= "") or (error_log and error_log ~= "") then
    return cmsgpack.pack(record, ran_for, worker or "", attempt or 0, last_error or "", error_log or "")
  end
  return cmsgpack.pack(record, ran_for, worker or "", attempt or 0)
end

-- history_read(key, ids): HMGET of `ids` from hash `key` when it exists
-- (often it does not: jobs that never failed leave no error), else falses.
local function history_read(key, ids)
  if redis.call("EXISTS", key) == 1 then return redis.call("HMGET", key, unpack(ids)) end
  return {}
end
