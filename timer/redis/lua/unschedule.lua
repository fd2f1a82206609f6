-- unschedule.lua: remove a timer, pending or in flight.
--
-- KEYS[1] -> <prefix>:{sNN}:due   ZSet: timer key -> Unix ms to deliver at
-- KEYS[2] -> <prefix>:{sNN}:meta  Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- ARGV[1] -> the timer key
--
-- Returns 1 if the key was pending (in due), else 0. A batch in a handler that
-- holds the key still delivers it, but it is neither acknowledged, requeued
-- nor recovered: its meta, which names the claim, is gone.
local n = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return n
