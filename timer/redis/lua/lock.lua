-- lock.lua: extend or release the seed lock, if this instance holds it.
--
-- KEYS[1] -> <prefix>:seedlock     String: the token of the instance seeding
-- ARGV[1] -> the token the lock was taken with (SET NX PX)
-- ARGV[2] -> a new time to live in ms, or 0 to release the lock
--
-- Returns 1 if the token held the lock, else 0 (it expired, another took it).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('DEL', KEYS[1])
end
return 1
