--[[
  cron_tick: enqueue the next ticks of one periodic entry (`[cron.NAME]`,
  `dueq cron add`), each exactly once. The entry's state in KEYS[1] holds
  the last tick enqueued and the fingerprint of the definition it was
  enqueued for: a tick at or before the last is skipped, so a call resent
  by a new leader, or made twice, enqueues nothing twice. A state with
  another fingerprint (the entry was changed or removed meanwhile: the
  admin thread writes the new state first) refuses the call. A tick whose
  id the queue already knows (live, done or cancelled: an earlier
  definition's tick at the same time) is passed over.

  A tick's job has a deterministic id (NAME@<tick in UTC>, made by the
  broker); due now it goes to the ready set, due later to its schedule
  partition like any delayed job (lib/schedule_put.lua), counted in
  `scheduled`, the schedule filter and `accepted`.

  KEYS[1]  cron      hash  entry name -> "<last tick ms>:<fingerprint>"
  KEYS[2]  schedule  zset  partition -> lower bound of its earliest due ms
  KEYS[3]  ready     zset  id -> due ms
  KEYS[4]  jobs      hash  id -> job record
  KEYS[5]  stats     hash  counters
  KEYS[6]  done      zset  id -> finished ms
  KEYS[7]  cancelled zset  id -> finished ms

  ARGV[1]  entry name
  ARGV[2]  fingerprint of the entry's definition (16 hex digits)
  ARGV[3]  now ms
  ARGV[4]  N, ticks (1..100), ascending
  ARGV[5+4i .. 8+4i] for tick i: tick ms (the due time), job id, job record
           (broker/store/job_record.hpp), schedule partition (0..32767)

  Returns  {enqueued, last tick ms}: enqueued -1 (and the stored last tick)
           when the state holds another fingerprint
  Errors   "ERR dueq bad-args <what>"; nothing is written then
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
--! include lib/schedule_put.lua
local name, fingerprint = ARGV[1], ARGV[2]
local now = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
if name == "" or not string.find(fingerprint, "^[0-9a-f]+$") or #fingerprint ~= 16 or not now or not n or n < 1
    or n > 100 or n ~= math.floor(n) or #ARGV ~= 4 + 4 * n then
  return redis.error_reply("ERR dueq bad-args cron_tick: expected a name, a fingerprint, now, N and 4 values per tick")
end
local previous = -1
for i = 0, n - 1 do
  local b = 5 + 4 * i
  local tick = tonumber(ARGV[b])
  if not tick or tick < 0 or tick <= previous or not string.find(ARGV[b], "^%d+$") or ARGV[b + 1] == ""
      or string.byte(ARGV[b + 2], 1) ~= 0x99 or not is_partition(ARGV[b + 3]) then
    return redis.error_reply("ERR dueq bad-args cron_tick: tick " .. i
      .. " has a bad or unordered time, an empty id, a bad record or a bad partition")
  end
  previous = tick
end
local last = 0
local state = redis.call("HGET", KEYS[1], name)
if state then
  local stored_last, stored_fingerprint = string.match(state, "^(%d+):(.*)$")
  if stored_fingerprint ~= fingerprint then return {-1, tonumber(stored_last) or 0} end
  last = tonumber(stored_last)
end
local written, slots = 0, filter_slots()
for i = 0, n - 1 do
  local b = 5 + 4 * i
  local tick = tonumber(ARGV[b])
  local id, record, partition = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local known = redis.call("HEXISTS", KEYS[4], id) == 1 or redis.call("ZSCORE", KEYS[2] .. ":" .. partition, id)
    or redis.call("ZSCORE", KEYS[6], id) or redis.call("ZSCORE", KEYS[7], id)
  if tick > last and known then
    last = tick
  elseif tick > last then
    if tick <= now then
      redis.call("ZADD", KEYS[3], ARGV[b], id)
      redis.call("HSET", KEYS[4], id, record)
    else
      schedule_put(KEYS[2], KEYS[4], partition, id, ARGV[b], record)
      filter_slot_add(slots, partition, id)
      type_slot_add(slots, partition, record)
    end
    written = written + 1
    last = tick
  end
end
schedule_counted_in(KEYS[2], KEYS[5], slots)
if written > 0 then redis.call("HINCRBY", KEYS[5], "accepted", written) end
redis.call("HSET", KEYS[1], name, string.format("%d", last) .. ":" .. fingerprint)
return {written, last}
