-- Flows and batches (docs/flows.md), included (by embed.cmake) in every
-- script that settles a job: ack, nack, reclaim, cancel. A group is a set of
-- member jobs and the job or jobs held until the set is settled: a flow
-- parent, which waits for its children ("f" .. parent id), or a batch's
-- success and complete callbacks ("b" .. batch id).
--
-- State, all of it in the queue's slot, named from the `groups` key G:
--   G            hash  "<group>:<field>": kind ("f" or "b"), state ("w"
--                      waiting, "s" settled, "x" failed by a child, "c"
--                      cancelled), open ("1" while a batch takes members),
--                      total, pending, done, dead, cancelled, and the held
--                      jobs' ids: parent, or success and complete
--   G..":of"     hash  member id -> its policy ("f" fail the parent, "i"
--                      ignore, "c" continue; "b" a batch member), its
--                      schedule partition in 5 digits, then its group; an
--                      entry goes when its member settles
--   G..":waiting" hash held id -> its own due ms, ":", its partition, ":",
--                      its role ("p" parent, "s" success, "c" complete) and
--                      its group; an entry goes when its job is released
--   G..":m:"..group set the group's members, kept for a look (a parent's
--                      children) until the group is swept
--   G..":settled" zset group -> ms it settled; sweep.lua forgets groups
--                      settled longer than the done retention
-- A held job waits in its schedule partition at group_held_due, so that
-- every count and view of the schedule has it (the audit's law holds as it
-- is) and promote never reaches it. Released, it goes to the ready set when
-- its own due time has passed (in a fair queue, whose ready set is ordered
-- by tags promote gives, to the schedule at now), else it stays in its
-- partition at its own due time.

-- 2^52 ms (the year 142,000): never due.
local group_held_due = 4503599627370496
local group_held_due_text = "4503599627370496"

-- KEYS a settling script passes: the groups hash and the queue keys a
-- released or failed held job needs (READY and FAIR may be nil where
-- nothing is released).
local function group_keys(groups, schedule, stats, jobs, dead, errors, cancelled, now, retention, ready, fair)
  return {groups = groups, of = groups .. ":of", waiting = groups .. ":waiting", settled = groups .. ":settled",
          schedule = schedule, stats = stats, jobs = jobs, dead = dead, errors = errors, cancelled = cancelled,
          now = now, retention = retention, ready = ready, fair = fair, fired = nil}
end

-- Every field a group has in the groups hash.
local group_field_names = {"kind", "state", "open", "total", "pending", "done", "dead", "cancelled", "parent", "success",
                           "complete"}

local function group_members_key(gk, group) return gk.groups .. ":m:" .. group end
local function group_get(gk, group, field) return redis.call("HGET", gk.groups, group .. ":" .. field) end

-- A held job's waiting entry: due ms, partition text, role and group.
local function group_held_entry(gk, id)
  local entry = redis.call("HGET", gk.waiting, id)
  if not entry then return nil end
  local due, partition, rest = string.match(entry, "^(%d+):(%d+):(.*)$")
  if not due then return nil end
  return {due = tonumber(due), partition = partition, role = string.sub(rest, 1, 1), group = string.sub(rest, 2)}
end

-- Takes held job ID out of its partition; its record, or nil when it is no
-- longer there.
local function group_unschedule(gk, id, partition)
  local key = gk.schedule .. ":" .. partition
  if redis.call("ZREM", key, id) == 0 then return nil end
  local record = redis.call("HGET", key .. ":jobs", id)
  redis.call("HDEL", key .. ":jobs", id)
  local slots = filter_slots()
  filter_slot_add(slots, partition, id)
  schedule_counted_out(gk.schedule, gk.stats, slots)
  if redis.call("EXISTS", key) == 0 then redis.call("ZREM", gk.schedule, partition) end
  return record
end

-- Releases held job ID: ready when its own due time has passed, else due
-- then. GK.fired is the earliest due time released (the broker's hint).
local function group_release(gk, id)
  local held = group_held_entry(gk, id)
  if not held then return end
  redis.call("HDEL", gk.waiting, id)
  local due = math.max(held.due, gk.now)
  local due_text = string.format("%d", due)
  if held.due <= gk.now and gk.ready and redis.call("EXISTS", gk.fair) == 0 then
    local record = group_unschedule(gk, id, held.partition)
    if not record then return end
    redis.call("HSET", gk.jobs, id, record)
    redis.call("ZADD", gk.ready, string.format("%d", held.due), id)
  else
    if redis.call("ZADD", gk.schedule .. ":" .. held.partition, "XX", "CH", due_text, id) == 0 then return end
    redis.call("ZADD", gk.schedule, "LT", due_text, held.partition)
  end
  if not gk.fired or due < gk.fired then gk.fired = due end
end

local group_member_settled  -- defined below: a failed parent settles in its own parent's group

-- Held job ID ends without running: "dead" (a child failed it) or
-- "cancelled" (its batch did not succeed). Its own group is told.
local function group_drop_held(gk, id, outcome, reason)
  local held = group_held_entry(gk, id)
  if not held then return end
  redis.call("HDEL", gk.waiting, id)
  local record = group_unschedule(gk, id, held.partition)
  if not record then return end
  if outcome == "dead" then
    redis.call("HSET", gk.jobs, id, record)
    redis.call("HSET", gk.errors, id, reason)
    redis.call("ZADD", gk.dead, gk.now, id)
    redis.call("HINCRBY", gk.stats, "dead", 1)
  else
    if gk.retention > 0 then redis.call("ZADD", gk.cancelled, gk.now, id) end
    redis.call("HINCRBY", gk.stats, "cancelled", 1)
  end
  group_member_settled(gk, id, outcome, reason)
end

local function group_mark_settled(gk, group, state)
  redis.call("HSET", gk.groups, group .. ":state", state)
  redis.call("ZADD", gk.settled, gk.now, group)
end

-- Every member of GROUP settled (and a batch is closed): its held jobs go.
local function group_complete(gk, group)
  group_mark_settled(gk, group, "s")
  if group_get(gk, group, "kind") == "f" then
    group_release(gk, group_get(gk, group, "parent"))
    return
  end
  local success, complete = group_get(gk, group, "success"), group_get(gk, group, "complete")
  local failed = (tonumber(group_get(gk, group, "dead")) or 0) + (tonumber(group_get(gk, group, "cancelled")) or 0)
  if success and success ~= "" then
    if failed == 0 then group_release(gk, success)
    else group_drop_held(gk, success, "cancelled", "") end
  end
  if complete and complete ~= "" then group_release(gk, complete) end
end

-- Member ID of some group settled: "done", "dead" or "cancelled" (REASON).
group_member_settled = function(gk, id, outcome, reason)
  local entry = redis.call("HGET", gk.of, id)
  if not entry then return end
  redis.call("HDEL", gk.of, id)
  local policy, group = string.sub(entry, 1, 1), string.sub(entry, 7)
  if group_get(gk, group, "state") ~= "w" then return end  -- failed or cancelled before
  local pending = redis.call("HINCRBY", gk.groups, group .. ":pending", -1)
  redis.call("HINCRBY", gk.groups, group .. ":" .. outcome, 1)
  if outcome ~= "done" and policy == "f" then
    group_mark_settled(gk, group, "x")
    local why = "child " .. id .. " " .. outcome
    if reason and reason ~= "" then why = why .. ": " .. reason end
    group_drop_held(gk, group_get(gk, group, "parent"), "dead", why)
  elseif pending <= 0 and group_get(gk, group, "open") ~= "1" then
    group_complete(gk, group)
  end
end

-- IDS settled with OUTCOME (REASONS[i] for a dead one). A queue without
-- groups pays one EXISTS.
local function group_settle(gk, ids, outcome, reasons)
  if #ids == 0 or redis.call("EXISTS", gk.of) == 0 then return end
  local entries = redis.call("HMGET", gk.of, unpack(ids))
  for i = 1, #ids do
    if entries[i] then group_member_settled(gk, ids[i], outcome, reasons and reasons[i] or "") end
  end
end
