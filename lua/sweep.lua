--[[
  sweep: forget done and cancelled jobs whose retention period is over, and
  the oldest of those past MAX kept, at most LIMIT of each per call (oldest
  first): a sustained rate times the retention would otherwise decide how
  much memory Redis needs. Entries finished within the duplicate window are
  kept whatever MAX says: their ids answer a resent enqueue "duplicate".
  It also trims the history (lib/history.lua): the entries of jobs finished
  before HCUTOFF, or older than the HMAX newest of their set, at most LIMIT
  ids of each set looked at per call. Each set's trim resumes from where
  the last one stopped (a finish ms in the stats hash); an entry whose id
  leaves its set goes with it, so none outlives its id.

  KEYS[1]  done        zset  id -> finished ms
  KEYS[2]  cancelled   zset  id -> finished ms
  KEYS[3]  stats       hash  ("forgotten_early" counts ids removed by MAX
                             before their retention ended,
                             "history_trimmed" history entries trimmed,
                             "history_from_done" and
                             "history_from_cancelled" where each trim
                             resumes)
  KEYS[4]  history     hash  id -> finished job's entry
  KEYS[5]  results     hash  id -> a done job's result (lua/ack.lua): goes
                             with its id from the done set
  KEYS[6]  groups      hash  flows and batches (lib/group.lua): a group that
                             settled before the cutoff goes, at most 100 per
                             call, its members' set with it

  ARGV[1]  cutoff ms: entries finished before it are removed
  ARGV[2]  limit (1..10000)
  ARGV[3]  max kept per set (>= 1)
  ARGV[4]  window start ms (>= cutoff): entries finished at or after it are
           never removed for MAX
  ARGV[5]  HCUTOFF ms (>= cutoff): history entries of jobs finished before
           it are trimmed (the queue keeps none: the call's now)
  ARGV[6]  HMAX (0..MAX) history entries kept per set (0: no count limit
           beside HCUTOFF)

  Returns  {removed done, removed cancelled, removed by MAX before their
           retention, earliest finish ms left in either set or -1 when both
           are empty, history entries trimmed, earliest finish ms of a job
           whose entry may be left or -1 when none, 1 when a history trim
           stopped at LIMIT or 100 groups went (else 0), groups removed};
           call again while either of the first two equals the limit or the
           seventh is 1 (the fourth and sixth tell when a sweep can next
           remove anything; the fourth counts settled groups too)
  Errors   "ERR dueq bad-args <what>"
  Fenced   KEYS take the queue's epoch key (and outside a Redis Cluster the
           leader's epoch counter) and ARGV the sender's leader epoch, last
           (lib/fence.lua); "ERR dueq fenced <what>" and nothing written when
           the sender was deposed
]]
--! include lib/fence.lua
--! include lib/partition.lua
--! include lib/schedule_filter.lua
--! include lib/group.lua
local cutoff = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local max_kept = tonumber(ARGV[3])
local window_start = tonumber(ARGV[4])
local history_cutoff = tonumber(ARGV[5])
local history_max = tonumber(ARGV[6])
if not cutoff or not limit or limit < 1 or limit > 10000 or not max_kept or max_kept < 1 or not window_start
    or window_start < cutoff or not history_cutoff or history_cutoff < cutoff or not history_max or history_max < 0
    or history_max > max_kept or #ARGV ~= 6 then
  return redis.error_reply("ERR dueq bad-args sweep: expected a cutoff, a limit of 1..10000, a max kept >= 1, a window start >= the cutoff, a history cutoff >= the cutoff and a history max of 0..max kept")
end
local has_history = redis.call("EXISTS", KEYS[4]) == 1
local has_results = redis.call("EXISTS", KEYS[5]) == 1
local out = {0, 0, 0, -1, 0, -1, 0, 0}
local function earliest(slot, score)
  if score and (out[slot] < 0 or tonumber(score) < out[slot]) then out[slot] = tonumber(score) end
end

-- Of the ids of set k that finished in the ms `at`, those ranked below
-- `first_kept` (ids of one ms in the set's order): the trim below stops
-- before that ms, but a batch of acks finishes many jobs in one ms, and
-- history_max keeps that many newest, not every job of the ms it ends in.
-- Up to 10,000 ids at once, not `limit`: those trimmed before are looked
-- at again (HDEL counts only the entries still there). A ms holds a few
-- hundred finishes at most; past 10,000 its excess waits for
-- history_retention.
local function trim_ties(k, at, first_kept)
  local excess = first_kept - redis.call("ZCOUNT", KEYS[k], "-inf", "(" .. at)
  if excess <= 0 or excess > 10000 then return end
  local ids = redis.call("ZRANGEBYSCORE", KEYS[k], at, at, "LIMIT", 0, excess)
  for i = 1, #ids, 5000 do
    out[5] = out[5] + redis.call("HDEL", KEYS[4], unpack(ids, i, math.min(i + 4999, #ids)))
  end
end

-- The history entries of set k finished before its cut, from where the
-- last trim stopped, at most `limit` ids; an id is looked at once unless
-- more than `limit` finished in the same ms (all of those are taken then).
local function trim_history(k, from_field)
  local cut = history_cutoff
  local card = redis.call("ZCARD", KEYS[k])
  if history_max > 0 and card > history_max then
    local oldest_kept = tonumber(redis.call("ZRANGE", KEYS[k], card - history_max, card - history_max, "WITHSCORES")[2])
    cut = math.max(cut, oldest_kept)
    if cut == oldest_kept then trim_ties(k, oldest_kept, card - history_max) end
  end
  local from = redis.call("HGET", KEYS[3], from_field) or "-inf"
  -- Never back: a cut below where the last trim stopped (history turned
  -- on again after it was off) finds nothing new.
  local from_ms = tonumber((string.gsub(from, "^%(", "")))
  if from ~= "-inf" and from_ms and from_ms >= cut then
    earliest(6, redis.call("ZRANGEBYSCORE", KEYS[k], from, "+inf", "WITHSCORES", "LIMIT", 0, 1)[2])
    return
  end
  local found = redis.call("ZRANGEBYSCORE", KEYS[k], from, "(" .. cut, "WITHSCORES", "LIMIT", 0, limit)
  local ids = {}
  for i = 1, #found, 2 do ids[#ids + 1] = found[i] end
  local resume = string.format("%d", cut)
  if #ids == limit then
    local last = found[#found]
    for _, id in ipairs(redis.call("ZRANGEBYSCORE", KEYS[k], last, last)) do ids[#ids + 1] = id end
    resume = "(" .. last
    out[7] = 1
  end
  for i = 1, #ids, 5000 do
    out[5] = out[5] + redis.call("HDEL", KEYS[4], unpack(ids, i, math.min(i + 4999, #ids)))
  end
  redis.call("HSET", KEYS[3], from_field, resume)
  earliest(6, redis.call("ZRANGEBYSCORE", KEYS[k], resume, "+inf", "WITHSCORES", "LIMIT", 0, 1)[2])
end

for k = 1, 2 do
  -- Counting first keeps the work bounded without materialising the ids.
  local old = redis.call("ZCOUNT", KEYS[k], "-inf", "(" .. ARGV[1])
  local outside_window = redis.call("ZCOUNT", KEYS[k], "-inf", "(" .. ARGV[4])
  local over = math.min(redis.call("ZCARD", KEYS[k]) - max_kept, outside_window)
  local remove = math.min(math.max(old, over), limit)
  if remove > 0 then
    if has_history or (has_results and k == 1) then
      local going = redis.call("ZRANGE", KEYS[k], 0, remove - 1)
      for i = 1, #going, 5000 do
        local some = {unpack(going, i, math.min(i + 4999, #going))}
        if has_history then out[5] = out[5] + redis.call("HDEL", KEYS[4], unpack(some)) end
        if has_results and k == 1 then redis.call("HDEL", KEYS[5], unpack(some)) end
      end
    end
    redis.call("ZREMRANGEBYRANK", KEYS[k], 0, remove - 1)
  end
  out[k] = remove
  if remove > old then out[3] = out[3] + remove - old end
  earliest(4, redis.call("ZRANGE", KEYS[k], 0, 0, "WITHSCORES")[2])
  if has_history then trim_history(k, k == 1 and "history_from_done" or "history_from_cancelled") end
end
-- Groups settled before the cutoff: a parent's children or a batch's
-- status were kept for a look as long as a done job's id is.
local gk = group_keys(KEYS[6], "", "", "", "", "", "", 0, 0)
local settled = redis.call("ZRANGEBYSCORE", gk.settled, "-inf", "(" .. ARGV[1], "LIMIT", 0, 100)
if #settled > 0 then
  local fields = {}
  for _, group in ipairs(settled) do
    for _, f in ipairs(group_field_names) do fields[#fields + 1] = group .. ":" .. f end
    redis.call("UNLINK", group_members_key(gk, group))
  end
  redis.call("HDEL", gk.groups, unpack(fields))
  redis.call("ZREM", gk.settled, unpack(settled))
  out[8] = #settled
  if #settled == 100 then out[7] = 1 end
end
earliest(4, redis.call("ZRANGE", gk.settled, 0, 0, "WITHSCORES")[2])
if out[3] > 0 then redis.call("HINCRBY", KEYS[3], "forgotten_early", out[3]) end
if out[5] > 0 then redis.call("HINCRBY", KEYS[3], "history_trimmed", out[5]) end
return out
