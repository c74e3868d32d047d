-- Included (by embed.cmake) in every script that takes a schedule partition
-- from the broker.

-- A partition as the broker sends it: plain decimal 0..32767. The text goes
-- into key names and filter offsets, so "01" or "1e1" must not pass.
local function is_partition(text)
  local partition = tonumber(text)
  return partition ~= nil and partition >= 0 and partition <= 32767 and text == string.format("%d", partition)
end
