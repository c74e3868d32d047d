-- Included (by embed.cmake) in every script that takes a schedule partition
-- from the broker.

-- A partition as the broker sends it: plain decimal 0..32767. The text goes
-- into key names and filter offsets, so "01" or "1e1" must not pass.
-- The partition's number, or nil where TEXT is not one.
local function partition_number(text)
  local partition = tonumber(text)
  if partition ~= nil and partition >= 0 and partition <= 32767 and text == string.format("%d", partition) then
    return partition
  end
  return nil
end

local function is_partition(text)
  return partition_number(text) ~= nil
end
