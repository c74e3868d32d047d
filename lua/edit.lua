--[[
  edit: replace the record (payload, type...: broker/store/job_record.hpp)
  of one job that waits, scheduled or ready, if it is still the record the
  editor read (compare and set: the broker compares the version the job
  document shows, a hash of these bytes, before it sends the call; here the
  bytes themselves are compared, so an edit, a debounce or a lease that came
  between refuses the call). Its id, due time, attempts, key and unique hold
  stay; the new record keeps the key (the broker builds it from the old one).

  KEYS[1]  schedule    zset  partition -> lower bound of its earliest due ms;
                             partition P is zset KEYS[1]..":"..P and hash
                             KEYS[1]..":"..P..":jobs"
  KEYS[2]  ready       zset  id -> due ms
  KEYS[3]  jobs        hash  id -> record of ready, leased and dead jobs

  ARGV[1]  job id
  ARGV[2]  its schedule partition (0..32767 in plain decimal)
  ARGV[3]  the record the editor read (non-empty)
  ARGV[4]  the new record (non-empty)

  Returns  {status}: 1 edited; 0 changed (the job waits, but its record is
           not the one read: nothing written); -1 not waiting (leased,
           finished or unknown: nothing written)
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
local id, partition, read, new = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if #ARGV ~= 4 or id == "" or not is_partition(partition) or read == "" or new == "" then
  return redis.error_reply("ERR dueq bad-args edit: expected an id, its partition, the record read and the new record")
end
local key = KEYS[1] .. ":" .. partition
local records
if redis.call("ZSCORE", key, id) then
  records = key .. ":jobs"
elseif redis.call("ZSCORE", KEYS[2], id) then
  records = KEYS[3]
else
  return {-1}
end
if redis.call("HGET", records, id) ~= read then return {0} end
redis.call("HSET", records, id, new)
return {1}
