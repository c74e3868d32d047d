--[[
  show: everything dueq knows about one job, read atomically (for `dueq job`
  and `dueq dead list/show`).

  KEYS[1]  scheduled         zset
  KEYS[2]  ready             zset
  KEYS[3]  leased            zset
  KEYS[4]  dead              zset
  KEYS[5]  done              zset
  KEYS[6]  cancelled         zset
  KEYS[7]  jobs              hash
  KEYS[8]  tokens            hash
  KEYS[9]  attempts          hash  id -> failed deliveries
  KEYS[10] errors            hash
  KEYS[11] error logs        hash
  KEYS[12] cancel requested  set

  ARGV[1]  job id

  Returns  {state, score, record, attempts (a running delivery included), token, error, error log,
            cancel requested}; state is one of scheduled, ready, leased,
           dead, done, cancelled, or "" when the job is unknown; score is
           the state set's score (due, lease deadline or finished ms);
           missing values are ""
  Errors   "ERR dueq bad-args <what>"
]]
local id = ARGV[1]
if not id or id == "" or #ARGV ~= 1 then return redis.error_reply("ERR dueq bad-args show: expected one id") end
local states = {"scheduled", "ready", "leased", "dead", "done", "cancelled"}
local state, score = "", ""
for k = 1, 6 do
  local s = redis.call("ZSCORE", KEYS[k], id)
  if s then
    state, score = states[k], s
    break
  end
end
local function get(k) return redis.call("HGET", KEYS[k], id) or "" end
-- The attempts hash counts failed deliveries; a running one is counted too.
local attempts = tonumber(get(9)) or 0
if state == "leased" then attempts = attempts + 1 end
return {state, score, get(7), tostring(attempts), get(8), get(10), get(11),
  tostring(redis.call("SISMEMBER", KEYS[12], id))}
