-- call_in_chunks(command, key, values, per_call): redis.call(command, key,
-- ...) over `values` in calls of at most `per_call` of them (keep it even
-- for field/value and score/member pairs): unpack() in Redis's Lua fails
-- above about 8,000 values.
local function call_in_chunks(command, key, values, per_call)
  for i = 1, #values, per_call do
    redis.call(command, key, unpack(values, i, math.min(i + per_call - 1, #values)))
  end
end
