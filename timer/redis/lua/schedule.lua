-- schedule.lua: set timers of one shard (an idempotent upsert).
--
-- KEYS[1] -> <prefix>:{sNN}:due   ZSet: timer key -> Unix ms to deliver at
-- KEYS[2] -> <prefix>:{sNN}:meta  Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- ARGV[1], ARGV[2], ... -> pairs (at most 1000): the due time, Unix ms rounded
--                         up (a timer never fires early), and the timer key
--
-- Returns 0. A new schedule replaces any older one, pending or in flight: the
-- key loses its meta (attempt count, original due time, and the claim that
-- holds it), so that claim can neither acknowledge, requeue nor recover it;
-- its lease and entry in claims still list the key, and are ignored for it.
-- While no timer of the shard is in flight or waiting to be redelivered (meta
-- holds nothing but claim.lua's pad field, or does not exist, as in a burst
-- of new orders) only the ZADD runs.
redis.call('ZADD', KEYS[1], unpack(ARGV))
local PAD = '\0lapse: this member keeps the set out of the listpack encoding (claim.lua)' -- as claim.lua's
if redis.call('HLEN', KEYS[2]) > redis.call('HEXISTS', KEYS[2], PAD) then
  local keys = {}
  for i = 2, #ARGV, 2 do
    keys[#keys + 1] = ARGV[i]
  end
  redis.call('HDEL', KEYS[2], unpack(keys))
end
return 0
