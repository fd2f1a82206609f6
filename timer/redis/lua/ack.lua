-- ack.lua: acknowledge a delivered batch (its handler returned nil).
--
-- KEYS[1] -> <prefix>:{sNN}:lease   ZSet: claim id -> lease deadline, Unix ms
-- KEYS[2] -> <prefix>:{sNN}:meta    Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- KEYS[3] -> <prefix>:{sNN}:claims  Hash: claim id -> its timer keys (cmsgpack array)
-- ARGV[1] -> the claim id the batch was claimed with
-- ARGV[2...] -> the timer keys of the batch
--
-- Returns how many timers were acknowledged: removed from meta. A key this
-- claim no longer holds (scheduled again, unscheduled, or recovered from an
-- expired lease and claimed by another consumer) is left alone. The claim's
-- lease and entry in claims go (they are gone already if it was recovered).
local suffix = ':' .. ARGV[1]
local keys = {unpack(ARGV, 2)}
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
