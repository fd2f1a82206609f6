-- extend.lua: extend the lease of a claim whose handler is still running.
--
-- KEYS[1] -> <prefix>:{sNN}:lease  ZSet: claim id -> lease deadline, Unix ms
-- ARGV[1] -> the claim id the batch was claimed with
-- ARGV[2] -> the new lease deadline, Unix ms
--
-- Returns 1 if the claim still had a lease, now extended, else 0: it was
-- acknowledged, requeued, or recovered when its lease ran out (then its
-- timers are due again, or another claim's, and stay so).
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', ARGV[2], ARGV[1])
return 1
