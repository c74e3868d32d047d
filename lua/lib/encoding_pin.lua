-- The encoding pin (broker/store/encoding_pin.hpp, lua/pin_encoding.lua) sits in a
-- queue's jobs, tokens and leased keys and is never a job: it is the one
-- entry holding a space, and its lease deadline is +inf. Scripts read these
-- keys through these helpers, so none skips the pin by hand.
local function is_encoding_pin(entry)
  return string.find(entry, " ", 1, true) ~= nil
end
-- Jobs in flight: the leases with a finite deadline.
local function count_leases(leased_key)
  return redis.call("ZCOUNT", leased_key, "-inf", "(+inf")
end
-- Leases with a deadline after `after` (a ZRANGEBYSCORE bound), never the pin.
local function leases_after(leased_key, after, limit, withscores)
  if withscores then
    return redis.call("ZRANGEBYSCORE", leased_key, after, "(+inf", "WITHSCORES", "LIMIT", 0, limit)
  end
  return redis.call("ZRANGEBYSCORE", leased_key, after, "(+inf", "LIMIT", 0, limit)
end
