--[[
  pin_encoding: put an encoding pin (broker/store/encoding_pin.hpp) into a queue's jobs,
  tokens and leased keys, where it is missing. Redis keeps a small hash or
  sorted set as a listpack, whose every lookup, insert and delete scans the
  whole key; these three hold every job in flight. One entry longer than
  hash-max-listpack-value / zset-max-listpack-value turns a key into a
  hashtable / skiplist, Redis never turns it back while the key exists, and
  the pin keeps the key from being deleted when its jobs are gone.

  The pin is never a job: it holds a space, which job ids do not. In leased
  its deadline is +inf, so no deadline range that scripts read ("-inf" to
  now, to "(+inf") takes it in.

  KEYS[1]  jobs        hash  id -> job record
  KEYS[2]  tokens      hash  id -> fencing token
  KEYS[3]  leased      zset  id -> lease deadline ms

  ARGV[1]  the pin: 129..65536 bytes holding a space

  Returns  number of keys the pin was added to (0..3)
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/encoding_pin.lua
local pin = ARGV[1]
if #ARGV ~= 1 or #pin < 129 or #pin > 65536 or not is_encoding_pin(pin) then
  return redis.error_reply("ERR dueq bad-args pin_encoding: expected one pin of 129..65536 bytes holding a space")
end
-- HSET, not HSETNX: deploy/users.acl grants the one, and the value never changes.
local added = redis.call("HSET", KEYS[1], pin, "pin") + redis.call("HSET", KEYS[2], pin, "pin")
return added + redis.call("ZADD", KEYS[3], "NX", "+inf", pin)
