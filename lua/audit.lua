--[[
  audit: check one queue's books and a bounded slice of its jobs,
  atomically. The broker walks the job records, the schedule partitions and
  the state sets and sends their ids here in slices; this script never scans.

  Every accepted job is in exactly one place, so at any instant
     accepted == done + cancelled + purged + |dead| + scheduled + |ready| + |leased|
  (a replay moves a job from dead to ready and changes neither side). Like
  done, cancelled and purged, scheduled is a counter kept by the scripts
  that move jobs, so the law checks it too; counting the partitions here
  would block Redis for tens of milliseconds. The script returns the
  numbers, read atomically; the broker compares them. A job is "lost" when
  it has a record but is in no state set. A scheduled job's record belongs
  in its partition's hash, every other job's in the jobs hash.

  KEYS[1]  schedule    zset  partition -> lower bound of its earliest due ms;
                             partition P is zset KEYS[1]..":"..P and hash
                             KEYS[1]..":"..P..":jobs"
  KEYS[2]  ready       zset
  KEYS[3]  leased      zset  id -> lease deadline ms (and an encoding pin at +inf, not counted)
  KEYS[4]  dead        zset
  KEYS[5]  stats       hash
  KEYS[6]  jobs        hash

  ARGV[1..2N] N ids to check (0..500), each followed by its schedule
           partition (0..32767 in plain decimal)

  Returns  {counts, problems}
           counts   = {scheduled, ready, leased, dead, accepted, done,
                       cancelled, purged} when called without ids, else {}
           problems = flat array of {id, description} pairs
  Errors   "ERR dueq bad-args <what>"
]]
--! include lib/partition.lua
--! include lib/encoding_pin.lua
if #ARGV > 1000 or #ARGV % 2 ~= 0 then
  return redis.error_reply("ERR dueq bad-args audit: at most 500 ids, each with its partition")
end
local ids, partition_keys = {}, {}
for i = 1, #ARGV, 2 do
  if ARGV[i] == "" or not is_partition(ARGV[i + 1]) then
    return redis.error_reply("ERR dueq bad-args audit: id " .. ((i + 1) / 2) .. " is empty or has a bad partition")
  end
  ids[#ids + 1] = ARGV[i]
  partition_keys[#partition_keys + 1] = KEYS[1] .. ":" .. ARGV[i + 1]
end
local problems = {}
if #ids == 0 then
  local c = redis.call("HMGET", KEYS[5], "scheduled", "accepted", "done", "cancelled", "purged")
  local counts = {tonumber(c[1] or 0), redis.call("ZCARD", KEYS[2]), count_leases(KEYS[3]),
    redis.call("ZCARD", KEYS[4]), tonumber(c[2] or 0), tonumber(c[3] or 0), tonumber(c[4] or 0),
    tonumber(c[5] or 0)}
  return {counts, problems}
end
local in_set = {}
for k = 2, 4 do in_set[k] = redis.call("ZMSCORE", KEYS[k], unpack(ids)) end
local records = redis.call("HMGET", KEYS[6], unpack(ids))
local function problem(id, what)
  problems[#problems + 1] = id
  problems[#problems + 1] = what
end
for i, id in ipairs(ids) do
  local in_schedule = redis.call("ZSCORE", partition_keys[i], id) ~= false
  local schedule_record = redis.call("HEXISTS", partition_keys[i] .. ":jobs", id) == 1
  local places = 0
  if in_schedule then places = 1 end
  for k = 2, 4 do
    if in_set[k][i] then places = places + 1 end
  end
  local has_record = records[i] ~= false or schedule_record
  if not has_record and places > 0 then
    problem(id, "listed in a state set but has no job record")
  elseif has_record and places == 0 then
    problem(id, "has a job record but is in no state set (lost)")
  elseif places > 1 then
    problem(id, "in more than one state set")
  elseif places == 1 and (in_schedule ~= schedule_record or (records[i] ~= false) == in_schedule) then
    problem(id, "its job record is not where its state keeps it")
  end
end
return {{}, problems}
