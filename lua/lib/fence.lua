-- Leader fencing (broker/loop/leadership.hpp). Every script that writes includes
-- this first. The connection that sends it (broker/store/redis_client.cpp)
-- appends the queue's epoch key to KEYS (and, outside a Redis Cluster, the
-- leader's epoch counter after it) and the sender's leader epoch to ARGV
-- (followed by "c" behind a Redis Cluster); they are taken off here, so the
-- script's own KEYS and ARGV are as its header lists them. A sender whose
-- epoch is older than the queue's, or than the newest epoch given (outside
-- a Cluster: there the counter is in another slot), was deposed: the call
-- writes nothing and fails. The second check also covers a queue no newer
-- leader knew of, such as one a deposed leader's late call would create.
-- A newer sender raises the queue's epoch, which fences every older leader
-- out of this queue.
local fence_arg = table.remove(ARGV) or ""
local fence_in_cluster = string.sub(fence_arg, -1) == "c"
local fence_leader_key = nil
if not fence_in_cluster then fence_leader_key = table.remove(KEYS) end
local fence_key = table.remove(KEYS)
local fence_epoch = tonumber(fence_in_cluster and string.sub(fence_arg, 1, -2) or fence_arg)
if not fence_key or (not fence_in_cluster and not fence_leader_key) or not fence_epoch or fence_epoch < 1
    or fence_epoch ~= math.floor(fence_epoch) then
  return redis.error_reply("ERR dueq bad-args fence: expected the queue's epoch key (and outside a Cluster the leader's epoch counter) and a leader epoch >= 1 last")
end
if fence_leader_key then
  local fence_newest = tonumber(redis.call("GET", fence_leader_key) or "0")
  if fence_newest > fence_epoch then
    return redis.error_reply("ERR dueq fenced: leader epoch " .. fence_epoch .. " was deposed by epoch " .. fence_newest)
  end
end
-- Redis Cluster: while the queue's slot moves to another master, some of
-- its keys (those a script builds, not those it declares) may be there
-- already, and a script that touches one fails half-way, keeping what it
-- wrote. A key that never exists tells: reading it fails on a master whose
-- slot is migrating. Nothing is written then, and the broker tries later.
-- The connection says "c" after the epoch behind a Redis Cluster only.
if fence_in_cluster and type(redis.pcall("EXISTS", fence_key .. ":probe")) == "table" then
  return redis.error_reply("TRYAGAIN dueq: the queue's slot is moving to another Redis Cluster master")
end
local fence_stored = tonumber(redis.call("GET", fence_key) or "0")
if fence_stored > fence_epoch then
  return redis.error_reply("ERR dueq fenced: leader epoch " .. fence_epoch .. " was deposed by epoch " .. fence_stored)
end
if fence_stored < fence_epoch then redis.call("SET", fence_key, fence_epoch) end
