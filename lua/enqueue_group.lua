--[[
  enqueue_group: store a flow (a tree of jobs: each parent waits for its
  children), jobs added to a batch, or both, all or nothing (docs/flows.md).

  A parent and a batch callback go to their schedule partitions at
  group_held_due, held until their groups settle (lib/group.lua); every
  other job as enqueue.lua puts it: due now to the ready set (in a fair
  queue to the schedule at its due time, for promote to give it its tag),
  due later to its schedule partition. A call is refused whole,
  and nothing is written, when any of its ids is known to the queue
  (scheduled, ready, leased, dead, or done/cancelled within the retention),
  when the queue's backlog has no room for all of its jobs, or when its
  batch is not as the action needs.

  KEYS[1]  schedule    zset  partition -> lower bound of its earliest due ms
                             (partition P: zset KEYS[1]..":"..P, hash
                             KEYS[1]..":"..P..":jobs"; the filter's chunks)
  KEYS[2]  ready       zset  (read: the backlog, a duplicate; jobs due now,
                             and a batch's callback released by the close)
  KEYS[3]  leased      zset  (read: the backlog)
  KEYS[4]  stats       hash  ("scheduled" and "accepted" counted)
  KEYS[5]  jobs        hash  (read: a duplicate; a job due now's record)
  KEYS[6]  done        zset  (read: a duplicate)
  KEYS[7]  cancelled   zset  (read: a duplicate; a success callback a
                             close finds failed goes here)
  KEYS[8]  groups      hash  flows and batches (lib/group.lua)
  KEYS[9]  fair        string present while the queue is fair: jobs due now
                             (and a callback released by the close) go
                             through the schedule for promote's tags

  ARGV[1]  now ms
  ARGV[2]  max backlog (0 = no limit), as enqueue.lua counts it
  ARGV[3]  batch id ("" none; 1..128 bytes)
  ARGV[4]  batch action: "none" (no batch), "open" (a new batch: its
           callbacks among the jobs; the batch must not exist), "add" (to an
           open batch)
  ARGV[5]  "1": the batch is closed after this call's jobs join it, "0" not
  ARGV[6]  retention seconds for a cancelled entry (0 = keep none): closing
           a batch with a failed member cancels its success callback
  ARGV[7]  the most members a batch may have (>= 1)
  ARGV[8]  N, number of jobs (0..1000; 0 only to open a batch, or to close one)
  ARGV[9+7i .. 15+7i] for job i: id, due ms (>= 0), job record (as
           enqueue.lua takes it), schedule partition (0..32767 in plain
           decimal), its parent's job number (1..i, a job before it; 0 for
           a root), its failure policy in its parent's group ("f" fail the
           parent, "i" ignore, "c" continue; "-" for a root), its role ("j"
           a job: a root is a member of the batch, if any; "s" the batch's
           success callback, "c" its complete callback: only with "open",
           one each at most, with no parent and no children)

  Returns  {code, job number, released}: code 1 accepted; 0 a duplicate (the
           job number of the first; looked at first, so that a request
           resent after it was applied is answered so whatever its batch
           became); 2 refused: the backlog has no room for
           N jobs; 3 the batch does not exist; 4 the batch is closed; 5 the
           batch exists already (open); 6 the batch would have more than
           its most members (nothing stored). released = the earliest due ms of a
           held job that closing the batch released, or -1
  Errors   "ERR dueq bad-args <what>"; nothing is written then
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
--! include lib/encoding_pin.lua
--! include lib/group.lua
local now = tonumber(ARGV[1])
local max_backlog = tonumber(ARGV[2])
local batch, action, close = ARGV[3], ARGV[4], ARGV[5]
local retention = tonumber(ARGV[6])
local max_members = tonumber(ARGV[7])
local n = tonumber(ARGV[8])
if not now or not max_backlog or max_backlog < 0 or not retention or retention < 0 or not max_members or max_members < 1
    or not n or n < 0 or n > 1000 or n % 1 ~= 0 or #ARGV ~= 8 + 7 * n
    or (action ~= "none" and action ~= "open" and action ~= "add") or (close ~= "0" and close ~= "1")
    or (action == "none") ~= (batch == "") or #batch > 128 or (action == "none" and close == "1")
    or (n == 0 and not (action == "open" or close == "1")) then
  return redis.error_reply("ERR dueq bad-args enqueue_group: expected now, max_backlog, a batch id and action "
    .. "(none, open or add), close 0|1, a retention, the most members of a batch, N (0 only to open or close a batch) and 7 values per job")
end
local max_depth = 4  -- levels of a flow, its root included
local function bad(i, what) return redis.error_reply("ERR dueq bad-args enqueue_group: job " .. i .. " " .. what) end
local ids, depth, has_children, callbacks = {}, {}, {}, {}
for i = 1, n do
  local b = 9 + 7 * (i - 1)
  local id, due, record, partition = ARGV[b], tonumber(ARGV[b + 1]), ARGV[b + 2], ARGV[b + 3]
  local parent, policy, role = tonumber(ARGV[b + 4]), ARGV[b + 5], ARGV[b + 6]
  local array, version = string.byte(record, 1, 2)
  if id == "" or not due or due < 0 or due % 1 ~= 0 or due >= group_held_due or not is_partition(partition)
      or not ((array == 0x99 and version == 2) or (array == 0x9a and version == 3) or (array == 0x9b and version == 4)
        or (array == 0x9d and version == 5)) then
    return bad(i, "has an empty id, a bad due, a bad record or a bad partition")
  end
  if not parent or parent % 1 ~= 0 or parent < 0 or parent >= i then return bad(i, "has a parent that is not a job before it") end
  if (parent == 0) ~= (policy == "-") or not (policy == "-" or policy == "f" or policy == "i" or policy == "c") then
    return bad(i, "has a policy other than f, i or c with a parent, or - without")
  end
  if role ~= "j" and role ~= "s" and role ~= "c" then return bad(i, "has a role other than j, s or c") end
  if role ~= "j" and (action ~= "open" or parent ~= 0 or callbacks[role]) then
    return bad(i, "is a callback outside an opened batch, with a parent, or a second one of its kind")
  end
  if parent > 0 and ARGV[9 + 7 * (parent - 1) + 6] ~= "j" then return bad(i, "has a callback for a parent") end
  if role ~= "j" then callbacks[role] = i end
  depth[i] = parent > 0 and depth[parent] + 1 or 1
  if depth[i] > max_depth then return bad(i, "is deeper than " .. max_depth .. " levels") end
  if parent > 0 then has_children[parent] = true end
  ids[i] = id
end

-- Any id known refuses the call whole: a producer's retry is a duplicate
-- (looked at before the batch: a resent close finds its batch closed),
-- and no part of a tree runs without the rest.
if n > 0 then
  local live = redis.call("HMGET", KEYS[5], unpack(ids))
  local function scores(key)
    if redis.call("EXISTS", key) == 0 then return {} end
    return redis.call("ZMSCORE", key, unpack(ids))
  end
  local done, cancelled, ready = scores(KEYS[6]), scores(KEYS[7]), scores(KEYS[2])
  -- The schedule is asked only where the schedule filter's counter of the
  -- id's bucket is not zero, and not at all while nothing is scheduled.
  local maybe_scheduled = {}
  if (tonumber(redis.call("HGET", KEYS[4], "scheduled")) or 0) > 0 then
    local slots = filter_slots()
    for i = 1, n do filter_slot_add(slots, ARGV[9 + 7 * (i - 1) + 3], ids[i]) end
    maybe_scheduled = filter_get(KEYS[1] .. ":filter", slots)
  end
  local seen = {}
  for i = 1, n do
    if live[i] or done[i] or cancelled[i] or ready[i] or seen[ids[i]]
        or ((maybe_scheduled[i] or 0) > 0 and redis.call("ZSCORE", KEYS[1] .. ":" .. ARGV[9 + 7 * (i - 1) + 3], ids[i])) then
      return {0, i, -1}
    end
    seen[ids[i]] = true
  end
end
-- The batch as the action needs it.
local batch_group = "b" .. batch
if action ~= "none" then
  local state = redis.call("HGET", KEYS[8], batch_group .. ":state")
  if action == "open" and state then return {5, 0, -1} end
  if action == "add" and not state then return {3, 0, -1} end
  if action == "add" and redis.call("HGET", KEYS[8], batch_group .. ":open") ~= "1" then return {4, 0, -1} end
  local joining = 0
  for i = 1, n do
    if ARGV[9 + 7 * (i - 1) + 4] == "0" and ARGV[9 + 7 * (i - 1) + 6] == "j" then joining = joining + 1 end
  end
  if (tonumber(redis.call("HGET", KEYS[8], batch_group .. ":total")) or 0) + joining > max_members then
    return {6, 0, -1}
  end
end
if max_backlog > 0 and n > 0 then
  local held = (tonumber(redis.call("HGET", KEYS[4], "scheduled")) or 0) + redis.call("ZCARD", KEYS[2])
    + count_leases(KEYS[3])
  if held + n > max_backlog then return {2, 0, -1} end
end

local gk = group_keys(KEYS[8], KEYS[1], KEYS[4], KEYS[5], "", "", KEYS[7], now, retention, KEYS[2], KEYS[9])
local slots = filter_slots()
local fields, members_of, of = {}, {}, {}  -- HSET arguments of groups; group -> member ids; of's HSET arguments
local function put_field(group, field, value)
  fields[#fields + 1], fields[#fields + 2] = group .. ":" .. field, value
end
if action == "open" then
  put_field(batch_group, "kind", "b")
  put_field(batch_group, "state", "w")
  put_field(batch_group, "open", "1")
  put_field(batch_group, "success", callbacks.s and ids[callbacks.s] or "")
  put_field(batch_group, "complete", callbacks.c and ids[callbacks.c] or "")
end
local batch_joined = 0
-- A fair queue's ready set is ordered by tags: its jobs due now go through
-- the schedule, and promote gives them their tags.
local fair = redis.call("EXISTS", KEYS[9]) == 1
local ready_args, records = {}, {}  -- ZADD and HSET arguments of the jobs due now
for i = 1, n do
  local b = 9 + 7 * (i - 1)
  local partition, parent, role = ARGV[b + 3], tonumber(ARGV[b + 4]), ARGV[b + 6]
  local due_text = ARGV[b + 1]
  local group = nil  -- the group this job waits for, if held
  if has_children[i] then group = "f" .. ids[i] end
  if group then
    put_field(group, "kind", "f")
    put_field(group, "state", "w")
    put_field(group, "parent", ids[i])
  end
  local held_role = has_children[i] and "p" or (role ~= "j" and role or nil)
  if held_role then
    redis.call("HSET", gk.waiting, ids[i], due_text .. ":" .. partition .. ":" .. held_role .. (group or batch_group))
    due_text = group_held_due_text
  end
  local member_of, policy = nil, ARGV[b + 5]
  if parent > 0 then member_of = "f" .. ids[parent]
  elseif role == "j" and action ~= "none" then member_of, policy, batch_joined = batch_group, "b", batch_joined + 1 end
  if member_of then
    if not members_of[member_of] then members_of[member_of] = {} end
    local list = members_of[member_of]
    list[#list + 1] = ids[i]
    of[#of + 1], of[#of + 2] = ids[i], policy .. string.format("%05d", tonumber(partition)) .. member_of
  end
  if not held_role and tonumber(due_text) <= now and not fair then
    -- A job that waits for nothing and is due: in line at once, as
    -- enqueue.lua puts it (lease.lua applies keys and limits).
    ready_args[#ready_args + 1], ready_args[#ready_args + 2] = due_text, ids[i]
    records[#records + 1], records[#records + 2] = ids[i], ARGV[b + 2]
  else
    local key = KEYS[1] .. ":" .. partition
    redis.call("ZADD", key, due_text, ids[i])
    redis.call("HSET", key .. ":jobs", ids[i], ARGV[b + 2])
    redis.call("ZADD", KEYS[1], "LT", due_text, partition)
    filter_slot_add(slots, partition, ids[i])
    type_slot_add(slots, partition, ARGV[b + 2])
  end
end
if #records > 0 then
  redis.call("HSET", KEYS[5], unpack(records))
  redis.call("ZADD", KEYS[2], unpack(ready_args))
end
for group, list in pairs(members_of) do
  if group ~= batch_group then
    put_field(group, "total", #list)
    put_field(group, "pending", #list)
  end
  redis.call("SADD", group_members_key(gk, group), unpack(list))
end
if #fields > 0 then redis.call("HSET", KEYS[8], unpack(fields)) end
if #of > 0 then redis.call("HSET", gk.of, unpack(of)) end
if action ~= "none" then
  redis.call("HINCRBY", KEYS[8], batch_group .. ":total", batch_joined)
  local pending = redis.call("HINCRBY", KEYS[8], batch_group .. ":pending", batch_joined)
  if close == "1" then
    redis.call("HSET", KEYS[8], batch_group .. ":open", "0")
    if pending == 0 then group_complete(gk, batch_group) end
  end
end
schedule_counted_in(KEYS[1], KEYS[4], slots)
if n > 0 then redis.call("HINCRBY", KEYS[4], "accepted", n) end
return {1, 0, gk.fired or -1}
