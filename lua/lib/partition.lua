-- Included (by embed.cmake) in every script that takes a schedule partition
-- from the broker.

-- A partition as the broker sends it: plain decimal 0..32767. The text goes
-- into key names and filter offsets, so "01" or "1e1" must not pass. A
-- pattern makes no new string (string.format did, per enqueued job).
local function is_partition(text)
  if not string.find(text, "^[1-9]%d?%d?%d?%d?$") then return text == "0" end
  return tonumber(text) <= 32767
end
