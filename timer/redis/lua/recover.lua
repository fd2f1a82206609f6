-- recover.lua: move timers whose lease expired (their consumer died, or hung
-- after its Run ended) back to due, to be claimed again at once.
--
-- KEYS[1] -> <prefix>:{sNN}:due    ZSet: timer key -> Unix ms to deliver at
-- KEYS[2] -> <prefix>:{sNN}:lease  ZSet: timer key -> lease deadline, Unix ms
-- KEYS[3] -> <prefix>:{sNN}:meta   Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- ARGV[1] -> now, Unix ms: a lease whose deadline <= now has expired
-- ARGV[2] -> the most timers to move (bounded, to keep Redis responsive)
--
-- Returns how many timers were moved. Each keeps its attempt count and
-- original due time in meta; its claim id is cleared, so the consumer that
-- held it can no longer acknowledge or requeue it.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, key in ipairs(expired) do
  redis.call('ZREM', KEYS[2], key)
  redis.call('ZADD', KEYS[1], 'NX', ARGV[1], key)
  local v = redis.call('HGET', KEYS[3], key)
  if v then
    local head = string.match(v, '^(%d+:[^:]+:)')
    if head then
      redis.call('HSET', KEYS[3], key, head)
    end
  end
end
return #expired
