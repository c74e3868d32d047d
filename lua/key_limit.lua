--[[
  key_limit: give one key of a queue a limit of its own (`dueq key limit`),
  over the queue's key_concurrency, or a weight of its own in fair dispatch
  (`dueq key weight`), or take it away. At most 10,000 keys of a queue have
  their own of each: a setting per tenant, not per job.

  KEYS[1]  limits   hash  key -> its own limit (lib/keys.lua), or weights:
                          key -> its own weight (lib/fair.lua)
  KEYS[2]  running  hash  key -> turns held now (read only)

  ARGV[1]  the key (1..128 bytes, any bytes)
  ARGV[2]  its limit: 1..1000000 jobs of the key leased at once, or its
           weight: 1..1000; "clear" takes its own away
  ARGV[3]  the highest value allowed: 1000000 for a limit, 1000 for a
           weight

  Returns  {code, previous value (0: none of its own), turns held now}:
             1 set (or cleared), 2 refused: the queue has 10,000 keys
             with their own already (nothing written)
  Errors   "ERR dueq bad-args <what>"; nothing is written then
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
local key, limit_text, highest = ARGV[1], ARGV[2], tonumber(ARGV[3])
local limit = tonumber(limit_text)
if #ARGV ~= 3 or not key or #key < 1 or #key > 128 or (highest ~= 1000000 and highest ~= 1000)
    or (limit_text ~= "clear" and (not limit or limit < 1 or limit > highest or limit ~= math.floor(limit)
        or not string.find(limit_text, "^%d+$"))) then
  return redis.error_reply("ERR dueq bad-args key_limit: expected a key of 1..128 bytes, a value of 1..1000000 "
    .. "(1..1000 for a weight) or clear, and 1000000 or 1000")
end
local previous = tonumber(redis.call("HGET", KEYS[1], key)) or 0
local running = tonumber(redis.call("HGET", KEYS[2], key)) or 0
if limit_text == "clear" then
  redis.call("HDEL", KEYS[1], key)
  return {1, previous, running}
end
if previous == 0 and redis.call("HLEN", KEYS[1]) >= 10000 then return {2, 0, running} end
redis.call("HSET", KEYS[1], key, limit_text)
return {1, previous, running}
