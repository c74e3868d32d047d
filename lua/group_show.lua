--[[
  group_show: a flow's or a batch's status and a page of its members, read
  atomically (`dueq batch status`, `dueq job` of a parent, the dashboard,
  a parent's handler reading its children): docs/flows.md.

  KEYS[1]  groups      hash  flows and batches (lib/group.lua)
  KEYS[2]  ready       zset
  KEYS[3]  leased      zset
  KEYS[4]  done        zset
  KEYS[5]  dead        zset
  KEYS[6]  cancelled   zset
  KEYS[7]  results     hash  id -> a done job's result
  KEYS[8]  errors      hash  id -> last error

  ARGV[1]  group: "f" .. a parent's id, or "b" .. a batch id
  ARGV[2]  SSCAN cursor of its members ("0" to start)
  ARGV[3]  members to look at (0..100; 0 = the status only)

  Returns  {} when the group is unknown (never made, or swept), else
           {kind, state, open, total, pending, done, dead, cancelled,
            parent, success, complete, settled ms ("" while it is not),
            next cursor ("0": the last page), members...}: kind "f" or
           "b"; state "waiting", "settled", "failed" (a child failed the
           parent) or "cancelled" (the parent was); then 4 values per
           member: id, state (scheduled, held: waiting for its own group,
           ready, leased, done, dead, cancelled, or "" once forgotten), a
           done member's result, a dead one's last error. SSCAN may give
           more members than asked (a small set comes whole: at most 128);
           results and errors past the page's first MiB of them are left
           out ("", read them with `dueq job`)
  Errors   "ERR dueq bad-args <what>"
]]
--! include lib/partition.lua
--! include lib/schedule_filter.lua
--! include lib/group.lua
local group, cursor, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
if #ARGV ~= 3 or not group or #group < 2 or not (string.sub(group, 1, 1) == "f" or string.sub(group, 1, 1) == "b")
    or not string.find(cursor, "^%d+$") or not count or count < 0 or count > 100 or count % 1 ~= 0 then
  return redis.error_reply("ERR dueq bad-args group_show: expected a group (f or b and an id), a cursor and 0..100")
end
local gk = group_keys(KEYS[1], "", "", "", "", "", "", 0, 0)
local fields = {"kind", "state", "open", "total", "pending", "done", "dead", "cancelled", "parent", "success", "complete"}
local names = {}
for i, f in ipairs(fields) do names[i] = group .. ":" .. f end
local values = redis.call("HMGET", KEYS[1], unpack(names))
if not values[1] then return {} end
local states = {w = "waiting", s = "settled", x = "failed", c = "cancelled"}
local out = {}
for i = 1, #fields do out[i] = values[i] or "" end
out[2] = states[out[2]] or out[2]
if out[1] == "f" then out[3] = "0" end
for i = 4, 8 do if out[i] == "" then out[i] = "0" end end
local settled = redis.call("ZSCORE", gk.settled, group)
out[#out + 1] = settled or ""
if count == 0 then
  out[#out + 1] = "0"
  return out
end
local page = redis.call("SSCAN", group_members_key(gk, group), cursor, "COUNT", count)
out[#out + 1] = page[1]
local bytes, max_bytes = 0, 1048576
local sets = {{KEYS[3], "leased"}, {KEYS[2], "ready"}, {KEYS[4], "done"}, {KEYS[5], "dead"}, {KEYS[6], "cancelled"}}
for _, id in ipairs(page[2]) do
  local state = ""
  for _, s in ipairs(sets) do
    if redis.call("ZSCORE", s[1], id) then
      state = s[2]
      break
    end
  end
  if state == "" and redis.call("HEXISTS", gk.waiting, id) == 1 then state = "held"
  elseif state == "" and redis.call("HEXISTS", gk.of, id) == 1 then state = "scheduled" end
  local result, err = "", ""
  if state == "done" then result = redis.call("HGET", KEYS[7], id) or "" end
  if state == "dead" then err = redis.call("HGET", KEYS[8], id) or "" end
  if bytes + #result + #err > max_bytes then result, err = "", "" end
  bytes = bytes + #result + #err
  out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = id, state, result, err
end
return out
