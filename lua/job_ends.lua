--[[
  job_ends: how each of N jobs ended, if it has, for the broker's WAIT
  requests (broker/loop/waits.hpp); reads only.

  KEYS[1]  schedule   zset  partition -> lower bound of its earliest due ms;
                            partition P is zset KEYS[1]..":"..P
  KEYS[2]  jobs       hash  live jobs (ready, leased, dead)
  KEYS[3]  done       zset  id -> finished ms
  KEYS[4]  dead       zset  id -> finished ms
  KEYS[5]  cancelled  zset  id -> finished ms
  KEYS[6]  results    hash  id -> a done job's result (lua/ack.lua)
  KEYS[7]  errors     hash  id -> its last error

  ARGV[1]  N (1..500)
  ARGV[1+2i-1], ARGV[1+2i]  for job i: its id and its schedule partition
           (0..32767 in plain decimal)

  Returns  3 values per job, in order: state (1 done, 2 dead, 3 cancelled,
           0 not ended, -1 unknown: no state holds it), the ms it ended
           (0 unless it ended), and its result (done) or last error (dead),
           else ""
  Errors   "ERR dueq bad-args <what>"
]]
--! include lib/partition.lua
local n = tonumber(ARGV[1])
if not n or n < 1 or n > 500 or n ~= math.floor(n) or #ARGV ~= 1 + 2 * n then
  return redis.error_reply("ERR dueq bad-args job_ends: expected N (1..500) and N ids with their partitions")
end
local out = {}
for i = 1, n do
  local id, partition = ARGV[2 * i], ARGV[2 * i + 1]
  if id == "" or not is_partition(partition) then
    return redis.error_reply("ERR dueq bad-args job_ends: an empty id or a bad partition")
  end
  local state, at, text = 0, 0, ""
  local done = redis.call("ZSCORE", KEYS[3], id)
  if done then
    state, at, text = 1, done, redis.call("HGET", KEYS[6], id) or ""
  else
    local dead = redis.call("ZSCORE", KEYS[4], id)
    if dead then
      state, at, text = 2, dead, redis.call("HGET", KEYS[7], id) or ""
    else
      local cancelled = redis.call("ZSCORE", KEYS[5], id)
      if cancelled then
        state, at = 3, cancelled
      elseif redis.call("HEXISTS", KEYS[2], id) == 0 and not redis.call("ZSCORE", KEYS[1] .. ":" .. partition, id) then
        state = -1
      end
    end
  end
  out[#out + 1] = state
  out[#out + 1] = math.floor(tonumber(at))
  out[#out + 1] = text
end
return out
