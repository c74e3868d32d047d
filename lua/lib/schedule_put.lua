-- Included (by embed.cmake) in the scripts that move one job at a time into
-- the schedule.

-- Moves a job into its partition: its due time into the partition's sorted
-- set, its record from JOBS_KEY into the partition's hash, and lowers the
-- partition's entry in the index. The caller counts it (stats, filter).
local function schedule_put(schedule_key, jobs_key, partition, id, due_text, record)
  local key = schedule_key .. ":" .. partition
  redis.call("ZADD", key, due_text, id)
  redis.call("HSET", key .. ":jobs", id, record)
  redis.call("HDEL", jobs_key, id)
  -- LT adds a missing partition and only ever lowers a present one.
  redis.call("ZADD", schedule_key, "LT", due_text, partition)
end
