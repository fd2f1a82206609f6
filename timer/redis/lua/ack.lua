-- ack.lua: acknowledge a delivered batch (its handler returned nil).
--
-- KEYS[1] -> <prefix>:{sNN}:lease   ZSet: claim id -> lease deadline, Unix ms
-- KEYS[2] -> <prefix>:{sNN}:meta    Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- KEYS[3] -> <prefix>:{sNN}:claims  Hash: claim id -> its timer keys (cmsgpack array)
-- ARGV[1] -> the claim id the batch was claimed with
--
-- Returns how many timers were acknowledged: removed from meta. The keys are
-- the claim's entry in claims (unpacking them costs Redis less than reading
-- them as arguments); a claim without one was recovered when its lease ran
-- out, and holds nothing. A key the claim no longer holds (scheduled again,
-- unscheduled) is left alone. The claim's lease and entry in claims go.
local packed = redis.call('HGET', KEYS[3], ARGV[1])
if not packed then
  return 0
end
local suffix = ':' .. ARGV[1]
local keys = cmsgpack.unpack(packed)
local metas = redis.call('HMGET', KEYS[2], unpack(keys))
local held = {}
for i, key in ipairs(keys) do
  local v = metas[i]
  if v and string.sub(v, -#suffix) == suffix then
    held[#held + 1] = key
  end
end
if #held > 0 then
  redis.call('HDEL', KEYS[2], unpack(held))
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return #held
