-- schedule.lua: set timers of one shard (an idempotent upsert).
--
-- KEYS[1] -> <prefix>:{sNN}:due    ZSet: timer key -> Unix ms to deliver at
-- KEYS[2] -> <prefix>:{sNN}:lease  ZSet: timer key -> lease deadline, Unix ms
-- KEYS[3] -> <prefix>:{sNN}:meta   Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- ARGV[1], ARGV[2], ... -> pairs (at most 1000): the due time, Unix ms rounded
--                         up (a timer never fires early), and the timer key
--
-- Returns 0. A new schedule replaces any older one, pending or in flight: the
-- key leaves the lease set and loses its attempt count and original due time,
-- so the claim that held it can neither acknowledge nor requeue it. While no
-- timer of the shard is in flight or waiting to be redelivered (lease and
-- meta empty, as in a burst of new orders) only the ZADD runs.
redis.call('ZADD', KEYS[1], unpack(ARGV))
local inLease = redis.call('EXISTS', KEYS[2]) == 1
local inMeta = redis.call('EXISTS', KEYS[3]) == 1
if inLease or inMeta then
  local keys = {}
  for i = 2, #ARGV, 2 do
    keys[#keys + 1] = ARGV[i]
  end
  if inLease then
    redis.call('ZREM', KEYS[2], unpack(keys))
  end
  if inMeta then
    redis.call('HDEL', KEYS[3], unpack(keys))
  end
end
return 0
