--[[
  scan_ids: one HSCAN step over a queue's job records, returning only the
  ids. The auditor walks every record; HSCAN itself would also send every
  record (payload included) over the wire, and Redis 7.0 has no NOVALUES.

  KEYS[1]  jobs        hash  id -> job record

  ARGV[1]  cursor ("0" to start)
  ARGV[2]  count hint (1..5000)

  Returns  {next cursor ("0" = done), ids}, without the encoding pin
  Errors   "ERR dueq bad-args <what>"
]]
--! include lib/encoding_pin.lua
local count = tonumber(ARGV[2])
if not tonumber(ARGV[1]) or not count or count < 1 or count > 5000 then
  return redis.error_reply("ERR dueq bad-args scan_ids: expected a cursor and a count of 1..5000")
end
local step = redis.call("HSCAN", KEYS[1], ARGV[1], "COUNT", count)
local ids = {}
for i = 1, #step[2], 2 do
  if not is_encoding_pin(step[2][i]) then ids[#ids + 1] = step[2][i] end
end
return {step[1], ids}
