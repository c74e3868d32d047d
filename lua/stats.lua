--[[
  stats: one queue's counts, read atomically.

  KEYS[1]  schedule    zset  partition -> lower bound of its earliest due ms
  KEYS[2]  ready       zset
  KEYS[3]  leased      zset  id -> lease deadline ms (and an encoding pin at +inf, not counted)
  KEYS[4]  dead        zset
  KEYS[5]  stats       hash  counters ("scheduled" = jobs in the schedule)
  KEYS[6]  paused      string ms when the queue was paused; absent while it runs
  KEYS[7]  history     hash  id -> finished job's entry (lib/history.lua)
  KEYS[8]  key running hash  key -> turns held (lib/keys.lua)
  KEYS[9]  key parked  zset  ready jobs waiting for a turn of their key;
                             KEYS[9]..":per_key" (key -> its members)
  KEYS[10] fair        string present while the queue is fair (lib/fair.lua):
                             its ready set is ordered by tags, not due times
  KEYS[11] jobs        hash  id -> job record (read for a fair queue's first
                             ready job)

  ARGV     none

  Returns  {scheduled, waiting, in_flight, dead, next_due, accepted, done,
            retried, stale_acks, cancelled, purged, died, unconfirmed,
            replayed, stale_extends, oldest_ready_due, paused_since,
            history_kept, history_trimmed, keys_running, waiting_for_key,
            top_keys}
           scheduled = in the schedule (due later, or due this instant and
           not yet promoted); waiting = ready, not leased; next_due = a
           lower bound of the earliest scheduled due ms, or -1 (also when only
           jobs held for their groups are scheduled); died =
           jobs that went to the dead-letter set ever; unconfirmed = of
           retried, deliveries that went back unstarted; oldest_ready_due =
           the due ms of the longest-waiting ready job (in a fair queue:
           of the job next in line), or -1;
           paused_since = ms when `dueq pause` paused it, or 0;
           history_kept = finished jobs whose document is kept now;
           history_trimmed = documents the sweep trimmed, ever;
           keys_running = keys holding a turn (docs/keys.md);
           waiting_for_key = ready jobs parked until their key has a turn
           (members: a cancelled one's until its key passes it);
           top_keys = {key, waiting, ...} of the 10 keys with the most
           members in key parked, most first (ties: the later key first)
  Errors   "ERR dueq bad-args <what>"
]]
--! include lib/encoding_pin.lua
if #ARGV ~= 0 then return redis.error_reply("ERR dueq bad-args stats: expected no arguments") end
-- The keys with the most jobs waiting for a turn that the reply names.
local top_keys = 10
local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local next_due = -1
if head[2] then next_due = tonumber(head[2]) end
-- Jobs held for their groups (lib/group.lua, at 2^52) are due when released.
if next_due >= 4503599627370496 then next_due = -1 end
local oldest = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
local oldest_ready_due = -1
if oldest[2] then oldest_ready_due = tonumber(oldest[2]) end
-- Only parked jobs wait (lib/keys.lua): the first one's due time.
if oldest_ready_due >= 4503599627370496 then oldest_ready_due = oldest_ready_due - 4503599627370496 end
-- A fair queue's scores are tags: the first job's due time is in its record
-- (broker/store/job_record.hpp: the due ms follows the payload).
if oldest[1] and redis.call("EXISTS", KEYS[10]) == 1 then
  local ok, record = pcall(cmsgpack.unpack, redis.call("HGET", KEYS[11], oldest[1]) or "")
  local due = ok and type(record) == "table" and (record[1] == 2 and record[4] or record[1] >= 3 and record[5]) or nil
  oldest_ready_due = type(due) == "number" and due or -1
end
local c = redis.call("HMGET", KEYS[5], "scheduled", "accepted", "done", "retried", "stale_acks", "cancelled", "purged",
  "dead", "unconfirmed", "replayed", "stale_extends", "history_trimmed", "snoozed", "expired")
return {tonumber(c[1] or 0), redis.call("ZCARD", KEYS[2]), count_leases(KEYS[3]), redis.call("ZCARD", KEYS[4]),
  next_due, tonumber(c[2] or 0), tonumber(c[3] or 0), tonumber(c[4] or 0), tonumber(c[5] or 0),
  tonumber(c[6] or 0), tonumber(c[7] or 0), tonumber(c[8] or 0), tonumber(c[9] or 0), tonumber(c[10] or 0),
  tonumber(c[11] or 0), oldest_ready_due, tonumber(redis.call("GET", KEYS[6]) or "0"), redis.call("HLEN", KEYS[7]),
  tonumber(c[12] or 0), redis.call("HLEN", KEYS[8]), redis.call("ZCARD", KEYS[9]),
  redis.call("ZREVRANGE", KEYS[9] .. ":per_key", 0, top_keys - 1, "WITHSCORES"), tonumber(c[13] or 0),
  tonumber(c[14] or 0)}
