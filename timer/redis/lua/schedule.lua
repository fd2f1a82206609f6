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
-- meta hold nothing but claim.lua's pad member, or do not exist, as in a
-- burst of new orders) only the ZADD runs.
redis.call('ZADD', KEYS[1], unpack(ARGV))
local PAD = '\0lapse: this member keeps the set out of the listpack encoding (claim.lua)' -- as claim.lua's
local padded = redis.call('ZSCORE', KEYS[2], PAD) and 1 or 0
local inLease = redis.call('ZCARD', KEYS[2]) > padded
local inMeta = redis.call('HLEN', KEYS[3]) > redis.call('HEXISTS', KEYS[3], PAD)
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
