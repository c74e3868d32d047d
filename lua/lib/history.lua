-- history_entry(record, started, worker, attempt, last_error, error_log): a
-- finished job's document as kept in the queue's history hash (id -> entry)
-- while its queue keeps history: one msgpack stream of the job record (as
-- the jobs hash held it), the start ms ("" when unknown), the worker ("" when
-- none ran it), the attempt it ended on (0 when none ran), its last error
-- and its error log ("" when none). Readers: show.lua, job_list.cpp.
local function history_entry(record, started, worker, attempt, last_error, error_log)
  return cmsgpack.pack(record, started or "", worker or "", attempt or 0, last_error or "", error_log or "")
end

-- history_read(key, ids): HMGET of `ids` from hash `key` when it exists
-- (often it does not: jobs that never failed leave no error), else falses.
local function history_read(key, ids)
  if redis.call("EXISTS", key) == 1 then return redis.call("HMGET", key, unpack(ids)) end
  return {}
end
