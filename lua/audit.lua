--[[
  audit: check one queue's books and a bounded slice of its job records,
  atomically. The broker walks the job records with SCAN and sends their ids
  here in slices; this script never scans.

  Every accepted job is in exactly one place, so at any instant
     accepted == done + cancelled + purged + |dead| + |scheduled| + |ready| + |leased|
  (a replay moves a job from dead to ready and changes neither side). The
  script returns the numbers, read atomically; the broker compares them.

  KEYS[1]  scheduled   zset
  KEYS[2]  ready       zset
  KEYS[3]  leased      zset
  KEYS[4]  dead        zset
  KEYS[5]  stats       hash
  KEYS[6]  job prefix

  ARGV[1..N] ids of job records to check (0..1000)

  Returns  {counts, problems}
           counts   = {scheduled, ready, leased, dead, accepted, done,
                       cancelled, purged}
           problems = flat array of {id, description} pairs
  Errors   "ERR dueq bad-args <what>"
]]
if #ARGV > 1000 then return redis.error_reply("ERR dueq bad-args audit: at most 1000 ids") end
local c = redis.call("HMGET", KEYS[5], "accepted", "done", "cancelled", "purged")
local counts = {redis.call("ZCARD", KEYS[1]), redis.call("ZCARD", KEYS[2]), redis.call("ZCARD", KEYS[3]),
  redis.call("ZCARD", KEYS[4]), tonumber(c[1] or 0), tonumber(c[2] or 0), tonumber(c[3] or 0),
  tonumber(c[4] or 0)}
local problems = {}
local function problem(id, text)
  problems[#problems + 1] = id
  problems[#problems + 1] = text
end
for _, id in ipairs(ARGV) do
  local s = redis.call("HGET", KEYS[6] .. id, "s")
  local in_sched = redis.call("ZSCORE", KEYS[1], id) ~= false
  local in_ready = redis.call("ZSCORE", KEYS[2], id) ~= false
  local in_leased = redis.call("ZSCORE", KEYS[3], id) ~= false
  local in_dead = redis.call("ZSCORE", KEYS[4], id) ~= false
  local places = (in_sched and 1 or 0) + (in_ready and 1 or 0) + (in_leased and 1 or 0) + (in_dead and 1 or 0)
  if not s then
    if places > 0 then problem(id, "listed in a state set but has no job record") end
  elseif places > 1 then
    problem(id, "in more than one state set")
  elseif s == "scheduled" and not in_sched then problem(id, "state scheduled but not in the schedule")
  elseif s == "ready" and not in_ready then problem(id, "state ready but not in the ready list")
  elseif s == "leased" and not in_leased then problem(id, "state leased but has no lease")
  elseif s == "dead" and not in_dead then problem(id, "state dead but not in the dead-letter set")
  elseif (s == "done" or s == "cancelled") and places > 0 then problem(id, "finished but still in a state set")
  end
end
return {counts, problems}
