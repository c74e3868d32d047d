-- Included (by embed.cmake) in every script that takes a schedule partition
-- from the broker.

-- A partition as the broker sends it: plain decimal 0..32767. The text goes
-- into key names and filter offsets, so "01" or "1e1" must not pass. A
-- pattern makes no new string (string.format did, per enqueued job).
local function is_partition(text)
  if not string.find(text, "^[1-9]%d?%d?%d?%d?$") then return text == "0" end
  return tonumber(text) <= 32767
end

-- The error reply for ARGV that is not 1..500 pairs of an id and its
-- partition (`script` names the caller in it), or nil when it is.
local function id_partition_pairs_problem(script)
  if #ARGV < 2 or #ARGV > 1000 or #ARGV % 2 ~= 0 then
    return redis.error_reply("ERR dueq bad-args " .. script .. ": expected 1..500 ids, each with its partition")
  end
  for i = 2, #ARGV, 2 do
    if ARGV[i - 1] == "" or not is_partition(ARGV[i]) then
      return redis.error_reply("ERR dueq bad-args " .. script .. ": id " .. (i / 2) .. " is empty or has a bad partition")
    end
  end
  return nil
end
