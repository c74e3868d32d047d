--[[
  show: everything dueq knows about one job, read atomically (for `dueq job`
  and `dueq dead list/show`), except its fencing token: a lookup never
  shows one (whoever holds a token can report the delivery).

  KEYS[1]  schedule          zset  partition -> lower bound of its earliest
                                    due ms; partition P is zset
                                    KEYS[1]..":"..P and hash
                                    KEYS[1]..":"..P..":jobs"
  KEYS[2]  ready             zset
  KEYS[3]  leased            zset
  KEYS[4]  dead              zset
  KEYS[5]  done              zset
  KEYS[6]  cancelled         zset
  KEYS[7]  jobs              hash
  KEYS[8]  attempts          hash  id -> failed deliveries
  KEYS[9]  errors            hash
  KEYS[10] error logs        hash
  KEYS[11] cancel requested  set
  KEYS[12] history           hash  id -> finished job's entry (lib/history.lua)
  KEYS[13] unique            hash  id -> the unique key it holds, with its mode
                                   (lib/unique.lua)
  KEYS[14] results           hash  id -> a done job's result (lua/ack.lua)
  KEYS[15] groups            hash  flows and batches (lib/group.lua): a job
                                   held until its group settles

  ARGV[1]  job id
  ARGV[2]  its schedule partition (0..32767 in plain decimal)
  ARGV[3]  optional: "1" adds a done job's result (a page of a list leaves
           it out: up to 64 KiB each)

  Returns  {state, score, record, attempts (a running delivery included), error, error log,
            cancel requested, started ms, worker, unique hold (mode letter
            and unique key, lib/unique.lua's entry, or ""), result (with
            ARGV[3] "1", of a done job, else ""), the group it is a member
            of until it settles ("f" .. its parent's id, "b" .. its batch's,
            or ""), "1" when it is a flow parent (its group "f" .. id is
            kept) else "0"}; state is one of
           scheduled, held (until its flow's children or its batch settle;
           score = its own due ms), ready, leased, dead, done, cancelled,
           or "" when the job is unknown; score is the state set's score
           (due, lease deadline or finished ms); a done or cancelled job's record,
           attempts, errors, start and worker come from its history entry
           while it is kept; missing values are ""
  Errors   "ERR dueq bad-args <what>"
]]
--! include lib/partition.lua
local id = ARGV[1]
if not id or id == "" or (#ARGV ~= 2 and #ARGV ~= 3) or not is_partition(ARGV[2]) or (ARGV[3] and ARGV[3] ~= "1") then
  return redis.error_reply("ERR dueq bad-args show: expected an id, its partition and optionally 1 (with the result)")
end
local result = ""
if ARGV[3] == "1" then result = redis.call("HGET", KEYS[14], id) or "" end
local function get(k) return redis.call("HGET", KEYS[k], id) or "" end
local partition_key = KEYS[1] .. ":" .. ARGV[2]
local state, score, record = "", "", ""
local s = redis.call("ZSCORE", partition_key, id)
if s then
  state, score, record = "scheduled", s, redis.call("HGET", partition_key .. ":jobs", id) or ""
  local held = redis.call("HGET", KEYS[15] .. ":waiting", id)
  if held then state, score = "held", string.match(held, "^(%d+):") or s end
else
  local states = {"ready", "leased", "dead", "done", "cancelled"}
  for k = 2, 6 do
    s = redis.call("ZSCORE", KEYS[k], id)
    if s then
      state, score = states[k - 1], s
      break
    end
  end
  record = get(7)
end
local member_of = string.sub(redis.call("HGET", KEYS[15] .. ":of", id) or "", 7)
local parent = tostring(redis.call("HEXISTS", KEYS[15], "f" .. id .. ":kind"))
if state == "done" or state == "cancelled" then
  local entry = redis.call("HGET", KEYS[12], id)
  local ok, kept, ran_for, worker, attempt, last_error, error_log = false
  if entry then ok, kept, ran_for, worker, attempt, last_error, error_log = pcall(cmsgpack.unpack, entry) end
  if ok and type(kept) == "string" then
    -- The entry holds how long before its finish (the score) it started.
    local started = ""
    if type(ran_for) == "number" then started = string.format("%d", tonumber(score) - ran_for) end
    return {state, score, kept, tostring(attempt or ""), last_error or "", error_log or "", "0", started,
      worker or "", "", result, member_of, parent}
  end
  return {state, score, "", "", "", "", "0", "", "", "", result, member_of, parent}
end
-- The attempts hash counts failed deliveries; a running one is counted too.
local attempts = tonumber(get(8)) or 0
if state == "leased" then attempts = attempts + 1 end
return {state, score, record, tostring(attempts), get(9), get(10),
  tostring(redis.call("SISMEMBER", KEYS[11], id)), "", "", get(13), "", member_of, parent}
