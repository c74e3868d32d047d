--[[
  repair: remove state-set entries whose job record no longer exists. Such an
  entry can never be delivered (lease drops it) and only skews the counts, so
  removing it is always safe. Ids that do have a record are left alone.

  KEYS[1]  scheduled   zset
  KEYS[2]  ready       zset
  KEYS[3]  leased      zset
  KEYS[4]  dead        zset
  KEYS[5]  jobs        hash

  ARGV[1..N] ids (1..1000)

  Returns  array of the ids whose dangling entries were removed
  Errors   "ERR dueq bad-args <what>"
]]
if #ARGV < 1 or #ARGV > 1000 then return redis.error_reply("ERR dueq bad-args repair: expected 1..1000 ids") end
local out = {}
for _, id in ipairs(ARGV) do
  if redis.call("HEXISTS", KEYS[5], id) == 0 then
    local removed = redis.call("ZREM", KEYS[1], id) + redis.call("ZREM", KEYS[2], id)
      + redis.call("ZREM", KEYS[3], id) + redis.call("ZREM", KEYS[4], id)
    if removed > 0 then out[#out + 1] = id end
  end
end
return out
