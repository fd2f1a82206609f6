-- seeded.lua: mark a shard seeded, if the seed that ends still holds its
-- marker. The fence of a seed: an instance sets every marker to its seed
-- lock's token before it seeds, and only a marker that still holds that
-- token when the seed is done may say "ok:<run id>".
--
-- KEYS[1] -> <prefix>:{sNN}:seeded  String: "ok:<run id>", or the token of the instance seeding
-- ARGV[1] -> the token of this instance's seed lock, which it set the marker to
-- ARGV[2] -> the value that says the shard is seeded: "ok:<run id>", the run
--            id of the Redis process that held the shard when the seed began
--
-- Returns 1 if the marker held the token and now holds ARGV[2], else 0 and
-- the marker is left alone: it is missing (Redis lost it during the seed, and
-- the timers the seed wrote before the loss with it), or another instance
-- took the seed over and set its own token. Either way this seed cannot
-- vouch for the shard, and the marker must not say "ok:".
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
