-- job_record_fields(record): a job record (broker/store/job_record.hpp)
-- unpacked, as version 2 numbers its fields whatever its version: [1]
-- version, [2] type, [3] payload, [4] due, [5] max attempts, [6] created,
-- [7] backoff base, [8] backoff cap, [9] checksum, and .key (nil when the
-- job has none; versions 3 to 5 carry it after the type). nil when it does
-- not unpack.
local function job_record_fields(record)
  local ok, fields = pcall(cmsgpack.unpack, record)
  if not ok or type(fields) ~= "table" then return nil end
  if (fields[1] == 3 and #fields == 10) or (fields[1] == 4 and #fields == 11) or (fields[1] == 5 and #fields == 13) then
    fields.key = table.remove(fields, 3)
  end
  return fields
end

-- history_record(record): the job record a kept document holds: the one
-- the jobs hash held with its payload checksum 0. The checksum guards a
-- delivery, and a kept document is never delivered again; as 0 it takes
-- one byte instead of nine, which brings an entry with a 100-byte payload
-- into the allocator's 160-byte class instead of its 192-byte one.
local function history_record(record)
  if record == "" then return record end
  local ok, fields = pcall(cmsgpack.unpack, record)
  local version = tonumber(fields and type(fields) == "table" and fields[1]) or 0
  if not ok or type(fields) ~= "table" or #fields ~= 7 + version + (version == 5 and 1 or 0) or #fields < 9 then
    return record
  end
  -- The checksum is the 9th field, the 10th from version 3 on (the key
  -- comes before it; the deadline and the trace context after it).
  fields[version >= 3 and 10 or 9] = 0
  return cmsgpack.pack(fields)
end

-- history_entry(now, record, started, worker, attempt, last_error, error_log):
-- a job's document as kept in the queue's history hash (id -> entry) when
-- it finished at `now` while its queue keeps history: one msgpack stream of
-- the job record (history_record), how long before `now` it
-- started (an integer; "" when unknown: `started` is the start ms as text),
-- the worker ("" when none ran it), the attempt it ended on (0 when none
-- ran), and only when it has them its last error and its error log. Small
-- on purpose: docs/jobs.md states its bytes. Reader: show.lua.
local function history_entry(now, record, started, worker, attempt, last_error, error_log)
  local ran_for = ""
  if started and started ~= "" and tonumber(started) then ran_for = now - tonumber(started) end
  if (last_error and last_error ~= "") or (error_log and error_log ~= "") then
    return cmsgpack.pack(history_record(record), ran_for, worker or "", attempt or 0, last_error or "", error_log or "")
  end
  return cmsgpack.pack(history_record(record), ran_for, worker or "", attempt or 0)
end

-- history_read(key, ids): HMGET of `ids` from hash `key` when it exists
-- (often it does not: jobs that never failed leave no error), else falses.
local function history_read(key, ids)
  if redis.call("EXISTS", key) == 1 then return redis.call("HMGET", key, unpack(ids)) end
  return {}
end
