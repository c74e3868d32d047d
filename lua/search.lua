--[[
  search: one bounded step of a search through one state of a queue. The
  jobs it looks at are those of one ZSCAN step over the state's set (for
  scheduled: over the schedule index, each partition it names read whole);
  the filters are applied here, so that only matching ids come back and a
  search of a large store sends Redis's time on looking, not on replies.
  Like SCAN, a job present for the whole search is looked at at least
  once; one that changes state meanwhile may be seen twice or not at all.
  A search of scheduled jobs by a type the type index holds
  (lib/schedule_filter.lua) reads only the partitions its bitmap names. A
  type joins the index at its first job in the schedule and leaves it when
  the schedule empties, so a cursor read as the other kind between two
  pages misses only jobs scheduled since the search began.

  KEYS[1]  set       zset  the state's: schedule (partition -> lower bound
                           of its earliest due; partition P is zset
                           KEYS[1]..":"..P, its records hash
                           KEYS[1]..":"..P..":jobs"; the type index
                           KEYS[1]..":types" and KEYS[1]..":type:"..T),
                           or ready, leased,
                           dead, done or cancelled (id -> score)
  KEYS[2]  records   hash  id -> job record (jobs) for ready, leased and
                           dead; id -> kept entry (history, lib/history.lua)
                           for done and cancelled; unused for scheduled
  KEYS[3]  errors    hash  id -> last error (live and dead jobs)

  ARGV[1]  how records are kept: "scheduled", "live" or "finished"
  ARGV[2]  cursor ("0" to start): ZSCAN's, or by the type index the
           partition to go on from
  ARGV[3]  jobs a step looks at (1..1000): a ZSCAN COUNT for the zsets;
           for scheduled, up to 512 partitions (each read whole; by 64
           ZSCAN steps of 8, or those the type index names) until this
           many jobs were looked at, each counted by what it costs:
           with a prefix (which ZSCAN's MATCH applies to a partition in C)
           two fifths, else with a type or error filter (its record read)
           two and a half, else one; the other states scan COUNT this
           divided by the latter
  ARGV[4]  id prefix ("" = any)
  ARGV[5]  type ("" = any; a finished job whose document is not kept has
           no type and does not match one)
  ARGV[6]  text its last error contains ("" = any)
  ARGV[7]  since, ARGV[8] until: the state's score (due, lease deadline or
           finish ms), both included

  Returns  {next cursor ("0": the state was read to its end), jobs looked
           at, then id, score of each match}
  Errors   "ERR dueq bad-args <what>"
  Reads only: not fenced.
]]
--! include lib/encoding_pin.lua
--! include lib/schedule_filter.lua
local how, cursor, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local prefix, want_type, want_error = ARGV[4], ARGV[5], ARGV[6]
local since, till = tonumber(ARGV[7]), tonumber(ARGV[8])
if #ARGV ~= 8 or (how ~= "scheduled" and how ~= "live" and how ~= "finished") or not cursor:match("^%d+$")
    or not count or count < 1 or count > 1000 or count % 1 ~= 0 or not since or not till then
  return redis.error_reply("ERR dueq bad-args search: expected scheduled|live|finished, a cursor, a count of " ..
    "1..1000, a prefix, a type, an error text, since and until")
end

-- The msgpack string at `pos` of `s` (fixstr, str8, str16, str32), or nil.
local function str_at(s, pos)
  local b = s:byte(pos)
  if not b then return nil end
  local len, start
  if b >= 0xa0 and b <= 0xbf then
    len, start = b - 0xa0, pos + 1
  elseif b == 0xd9 then
    len, start = s:byte(pos + 1), pos + 2
  elseif b == 0xda then
    len, start = s:byte(pos + 1) * 256 + s:byte(pos + 2), pos + 3
  elseif b == 0xdb then
    len, start = ((s:byte(pos + 1) * 256 + s:byte(pos + 2)) * 256 + s:byte(pos + 3)) * 256 + s:byte(pos + 4), pos + 5
  else
    return nil
  end
  if not len then return nil end
  return s:sub(start, start + len - 1)
end

local function type_of(id, record)
  if how == "finished" then
    -- The kept entry's first value is the record.
    return record and record_type(str_at(record, 1))
  end
  return record_type(record)
end

local function error_of(id, record, errors)
  if how == "finished" then
    if not record then return nil end
    local ok, _, _, _, _, last_error = pcall(cmsgpack.unpack, record)
    return ok and last_error or nil
  end
  return errors
end

local any_time = since <= 0 and till >= 9e18
local plen = #prefix
local reply, looked_at, spent = {"0", 0}, 0, 0

-- Of the jobs in `flat` (id, score, id, score, ...; the encoding pin
-- left out), those that pass every filter, appended to `out`; records_key
-- is where their records are. Returns how many jobs it looked at.
local function keep_matches(flat, records_key, out)
  local candidates, candidate_scores = {}, {}
  local looked = 0
  for i = 1, #flat, 2 do
    local id = flat[i]
    if not is_encoding_pin(id) then
      looked = looked + 1
      local score = flat[i + 1]
      if (plen == 0 or id:sub(1, plen) == prefix) and (any_time or (tonumber(score) >= since and tonumber(score) <= till)) then
        candidates[#candidates + 1] = id
        candidate_scores[#candidate_scores + 1] = score
      end
    end
  end
  if #candidates == 0 then return looked end
  if want_type == "" and want_error == "" then
    for i = 1, #candidates do
      out[#out + 1] = candidates[i]
      out[#out + 1] = candidate_scores[i]
    end
    return looked
  end
  local records, errors = {}, {}
  if want_type ~= "" or (want_error ~= "" and how == "finished") then
    records = redis.call("HMGET", records_key, unpack(candidates))
  end
  if want_error ~= "" and how ~= "finished" then errors = redis.call("HMGET", KEYS[3], unpack(candidates)) end
  for i = 1, #candidates do
    local id, record = candidates[i], records[i] or nil
    local match = want_type == "" or type_of(id, record) == want_type
    if match and want_error ~= "" then
      local text = error_of(id, record, errors[i] or nil)
      match = text ~= nil and string.find(text, want_error, 1, true) ~= nil
    end
    if match then
      out[#out + 1] = id
      out[#out + 1] = candidate_scores[i]
    end
  end
  return looked
end

-- How far the scheduled state is read per call: partitions hold ~30 jobs
-- each at a million, so a call reads several, to do as much as one of the
-- other states.
local most_partitions = 512

-- With an id prefix, a partition is read by ZSCAN's MATCH, which passes
-- over its ids in C: only the matches reach Lua (and their records). A job
-- so looked at costs Redis about two fifths of one read into Lua (0.22
-- against 0.58 us, a million jobs scheduled, 100-byte payloads), and is
-- counted so against the step's bound: a step looks at more jobs for the
-- same time.
local match_cost = 0.4
-- A type or error filter reads the record (or the error) of each job that
-- passed the others: without a prefix, every job's. A job so looked at
-- costs about two and a half plain ones (1.4 against 0.58 us), and counts
-- so: a step of a search by type holds Redis no longer than a plain one.
local read_cost = (want_type ~= "" or want_error ~= "") and 2.5 or 1
local pattern = plen > 0 and (prefix:gsub("[%*%?%[%]\\]", "\\%0")) .. "*" or nil

-- Looks into schedule partition `partition` (its key): the matches go to
-- the reply. Returns the jobs looked at and what they cost the step.
local function look_into(partition)
  if not pattern then
    local looked = keep_matches(redis.call("ZRANGE", partition, 0, -1, "WITHSCORES"), partition .. ":jobs", reply)
    return looked, looked * read_cost
  end
  local flat, at = {}, "0"
  repeat
    local step = redis.call("ZSCAN", partition, at, "MATCH", pattern, "COUNT", 1000)
    at = step[1]
    for i = 1, #step[2] do flat[#flat + 1] = step[2][i] end
  until at == "0"
  keep_matches(flat, partition .. ":jobs", reply)
  local looked = redis.call("ZCARD", partition)
  return looked, looked * match_cost
end

if how == "scheduled" and want_type ~= "" and redis.call("SISMEMBER", KEYS[1] .. ":types", want_type) == 1 then
  -- The type index names the partitions that may hold the type; the
  -- cursor is the partition to go on from.
  local index, from, read = KEYS[1] .. ":type:" .. want_type, tonumber(cursor), 0
  while from <= 32767 and spent < count and read < most_partitions do
    local p = redis.call("BITPOS", index, 1, from, 32767, "BIT")
    if p < 0 then break end
    local looked, cost = look_into(KEYS[1] .. ":" .. p)
    looked_at, spent = looked_at + looked, spent + cost
    read, from = read + 1, p + 1
  end
  if spent >= count or read >= most_partitions then reply[1] = from <= 32767 and string.format("%d", from) or "0" end
elseif how == "scheduled" then
  local scans = 0
  repeat
    scans = scans + 1
    local step = redis.call("ZSCAN", KEYS[1], cursor, "COUNT", 8)
    cursor = step[1]
    local entries = step[2]
    for i = 1, #entries, 2 do
      local looked, cost = look_into(KEYS[1] .. ":" .. entries[i])
      looked_at, spent = looked_at + looked, spent + cost
    end
  until cursor == "0" or spent >= count or scans >= most_partitions / 8
  reply[1] = cursor
else
  local step = redis.call("ZSCAN", KEYS[1], cursor, "COUNT", math.max(1, math.floor(count / (plen > 0 and 1 or read_cost))))
  reply[1] = step[1]
  looked_at = keep_matches(step[2], KEYS[2], reply)
end
reply[2] = looked_at
return reply
