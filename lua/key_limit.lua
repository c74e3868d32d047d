--[[
  key_limit: give one key of a queue a limit of its own (`dueq key limit`),
  over the queue's key_concurrency, a rate limit of its own (`dueq key
  rate`), over its key_rate, or a weight of its own in fair dispatch (`dueq
  key weight`), or take it away. At most 10,000 keys of a queue have their
  own of each: a setting per tenant, not per job.

  KEYS[1]  limits   hash  key -> its own limit (lib/keys.lua), or rates: key
                          -> its own jobs per second, or weights: key -> its
                          own weight (lib/fair.lua)
  KEYS[2]  running  hash  key -> turns held now (read only)

  ARGV[1]  the key (1..128 bytes, any bytes)
  ARGV[2]  its value, or "clear" to take its own away: a limit is 1..1000000
           jobs of the key leased at once, a rate 0.001..1000000 jobs
           started per second (decimals allowed), a weight 1..1000
  ARGV[3]  which: "limit", "rate" or "weight"

  Returns  {code, previous value as it was set ("": none of its own), turns
           held now}:
             1 set (or cleared), 2 refused: the queue has 10,000 keys
             with their own already (nothing written)
  Errors   "ERR dueq bad-args <what>"; nothing is written then
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
local key, text, which = ARGV[1], ARGV[2], ARGV[3]
local value = tonumber(text)
local bounds = {limit = {1, 1000000, "^%d+$"}, weight = {1, 1000, "^%d+$"}, rate = {0.001, 1000000, "^%d+%.?%d*$"}}
local b = bounds[which or ""]
if #ARGV ~= 3 or not key or #key < 1 or #key > 128 or not b
    or (text ~= "clear" and (not value or value < b[1] or value > b[2] or not string.find(text, b[3]))) then
  return redis.error_reply("ERR dueq bad-args key_limit: expected a key of 1..128 bytes, a value (a limit of "
    .. "1..1000000, a rate of 0.001..1000000, a weight of 1..1000) or clear, and limit, rate or weight")
end
local previous = redis.call("HGET", KEYS[1], key) or ""
local running = tonumber(redis.call("HGET", KEYS[2], key)) or 0
if text == "clear" then
  redis.call("HDEL", KEYS[1], key)
  return {1, previous, running}
end
if previous == "" and redis.call("HLEN", KEYS[1]) >= 10000 then return {2, "", running} end
redis.call("HSET", KEYS[1], key, text)
return {1, previous, running}
