-- Unique jobs (docs/keys.md), included (by embed.cmake) in enqueue.lua and
-- in every script where a job stops waiting, starts or finishes. A job
-- enqueued with a unique key holds it; while it does, a new job of the
-- queue with the same unique key is answered duplicate with its id.
--
-- State, all of it in the queue's slot:
--   unique         hash    id -> its mode ("w" waiting, "s" started, "d"
--                          done, "p" period, "b" debounced: then the
--                          latest due time a debounce may give it, 16
--                          digits), then its unique key: the jobs that hold,
--                          or (period) held, a unique key
--   unique..":"..K string  "MP:ID": mode, schedule partition and id of the
--                          job holding unique key K; with period, it
--                          expires with the period (PX), so an idle key
--                          costs nothing
-- The hold ends, by mode: "w" and "b" when the job is first leased, "s" when a
-- worker announces its start, "d" when it is done; any of them when the job
-- dies or is cancelled (`gone`). A period's string outlives a job that is
-- done (a throttle: one per period), not one that dies or is cancelled.

-- The string of unique key UKEY beside the UNIQUE hash.
local function unique_string(unique, ukey)
  return unique .. ":" .. ukey
end

-- The id, mode and partition of a unique key's string "MP:ID" (M one
-- letter, P digits), or nil.
local function unique_holder(value)
  if not value then return nil end
  local colon = string.find(value, ":", 1, true)
  if not colon then return nil end
  return string.sub(value, colon + 1), string.sub(value, 1, 1), string.sub(value, 2, colon - 1)
end

-- Ends the holds of IDS at EVENT: "lease", "start", "done" or "gone" (dead
-- or cancelled). One EXISTS for a queue that never had a unique job.
local function unique_release(unique, ids, event)
  if #ids == 0 or redis.call("EXISTS", unique) == 0 then return end
  local holds = redis.call("HMGET", unique, unpack(ids))
  for i = 1, #ids do
    local hold = holds[i]
    if hold then
      local mode = string.sub(hold, 1, 1)
      local ends = event == "gone" or event == "done" or (event == "start" and mode ~= "d" and mode ~= "p")
        or (event == "lease" and (mode == "w" or mode == "b"))
      if ends then
        if mode ~= "p" or event == "gone" then
          -- "b" entries carry the debounce deadline (16 digits) before the key.
          local s = unique_string(unique, string.sub(hold, mode == "b" and 18 or 2))
          if unique_holder(redis.call("GET", s)) == ids[i] then redis.call("DEL", s) end
        end
        redis.call("HDEL", unique, ids[i])
      end
    end
  end
end
