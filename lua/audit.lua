--[[
  audit: check one queue's books and a bounded slice of its jobs,
  atomically. The broker walks the job records (HSCAN) and the state sets and
  sends their ids here in slices; this script never scans.

  Every accepted job is in exactly one place, so at any instant
     accepted == done + cancelled + purged + |dead| + |scheduled| + |ready| + |leased|
  (a replay moves a job from dead to ready and changes neither side). The
  script returns the numbers, read atomically; the broker compares them.
  A job is "lost" when it has a record but is in no state set.

  KEYS[1]  scheduled   zset
  KEYS[2]  ready       zset
  KEYS[3]  leased      zset
  KEYS[4]  dead        zset
  KEYS[5]  stats       hash
  KEYS[6]  jobs        hash

  ARGV[1..N] ids to check (0..1000)

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
if #ARGV == 0 then return {counts, problems} end
local in_set = {}
for k = 1, 4 do in_set[k] = redis.call("ZMSCORE", KEYS[k], unpack(ARGV)) end
local records = redis.call("HMGET", KEYS[6], unpack(ARGV))
for i, id in ipairs(ARGV) do
  local places = 0
  for k = 1, 4 do
    if in_set[k][i] then places = places + 1 end
  end
  if not records[i] and places > 0 then
    problems[#problems + 1] = id
    problems[#problems + 1] = "listed in a state set but has no job record"
  elseif records[i] and places == 0 then
    problems[#problems + 1] = id
    problems[#problems + 1] = "has a job record but is in no state set (lost)"
  elseif places > 1 then
    problems[#problems + 1] = id
    problems[#problems + 1] = "in more than one state set"
  end
end
return {counts, problems}
