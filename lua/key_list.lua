--[[
  key_list: one page of a queue's keys that hold turns now or have a limit
  (or rate limit, or weight) of their own (`dueq key list`), read only.

  KEYS[1]  running  hash  key -> turns held now (lib/keys.lua)
  KEYS[2]  limits   hash  key -> its own limit (or the rates or weights hash,
                          whose values are read in its place)
  KEYS[3]  parked   zset  ready jobs waiting for a turn of their key (lex)

  ARGV[1]  "running" or "limits": which hash to page through
  ARGV[2]  HSCAN cursor ("0" to start)
  ARGV[3]  COUNT hint (1..1000)

  Returns  {next cursor ("0": done), key, turns held, own value as it was
           set ("": none),
           jobs parked waiting for a turn, key, ...}; a key with jobs
           parked always holds a turn, so "running" lists every key with a
           backlog (parked counts members: a cancelled job's until the key
           passes it)
  Errors   "ERR dueq bad-args <what>"
]]
local which, cursor, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
if #ARGV ~= 3 or (which ~= "running" and which ~= "limits") or not cursor or not string.find(cursor, "^%d+$")
    or not count or count < 1 or count > 1000 or count ~= math.floor(count) then
  return redis.error_reply("ERR dueq bad-args key_list: expected running or limits, a cursor and a count of 1..1000")
end
local page = redis.call("HSCAN", which == "running" and KEYS[1] or KEYS[2], cursor, "COUNT", count)
local out = {page[1]}
local entries = page[2]
for i = 1, #entries, 2 do
  local key = entries[i]
  local running, own
  if which == "running" then
    running, own = entries[i + 1], redis.call("HGET", KEYS[2], key) or ""
  else
    running, own = redis.call("HGET", KEYS[1], key) or "0", entries[i + 1]
  end
  local prefix = string.format("%03d", #key) .. key
  out[#out + 1] = key
  out[#out + 1] = tonumber(running) or 0
  out[#out + 1] = own
  out[#out + 1] = redis.call("ZLEXCOUNT", KEYS[3], "[" .. prefix, "(" .. prefix .. ":")
end
return out
