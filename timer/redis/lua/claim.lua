-- claim.lua: the atomic grab of one shard's due timers. Two consumers can
-- never both take a timer: the script moves it from due to a claim in one step.
--
-- KEYS[1] -> <prefix>:{sNN}:due     ZSet: timer key -> Unix ms to deliver at
-- KEYS[2] -> <prefix>:{sNN}:lease   ZSet: claim id -> lease deadline, Unix ms
-- KEYS[3] -> <prefix>:{sNN}:meta    Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- KEYS[4] -> <prefix>:{sNN}:claims  Hash: claim id -> its timer keys (cmsgpack array)
-- ARGV[1] -> now, Unix ms (floored): a timer is due when its score <= now
-- ARGV[2] -> the lease deadline of this claim, Unix ms
-- ARGV[3] -> the most timers to take (the batch size, at most 1000)
-- ARGV[4] -> the claim id, unique to this claim (no ':')
--
-- Returns {next, key1, attempt1, due1, key2, attempt2, due2, ...}: the timers
-- taken, earliest first, each with its delivery count (this one included)
-- and its original due time (Unix ms, the first schedule's, kept in meta
-- across redeliveries); next is the score of the earliest timer left in due,
-- or '' when due is empty. The claim holds one lease entry, whatever its
-- size, and its keys in claims; each timer's meta names the claim, which
-- acknowledging, requeueing and recovering check: a timer whose meta no
-- longer names the claim (scheduled again meanwhile) is not the claim's.
-- Taking no timer writes nothing.
--
-- meta keeps one field no timer has (PAD), longer than Redis's
-- hash-max-listpack-value (64), written with every claim so that Redis makes
-- meta a hash table and keeps it so: as a listpack (up to 512 entries) each
-- field of a batch is found and inserted by a scan of the whole hash, and a
-- claim of 200 timers costs Redis several times as much. lease and claims
-- need none: they hold an entry per claim in flight (a few per instance), and
-- a claim's packed keys are mostly longer than 64 bytes anyway.
local PAD = '\0lapse: this member keeps the set out of the listpack encoding (claim.lua)'
local taken = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local out = {''}
if #taken > 0 then
  local keys = {}
  for i = 1, #taken, 2 do
    keys[#keys + 1] = taken[i]
  end
  local metas = redis.call('HMGET', KEYS[3], unpack(keys))
  local newmeta = {PAD, PAD}
  for i, key in ipairs(keys) do
    local attempts, due = 0, taken[2 * i]
    if metas[i] then -- a redelivery: failed, or recovered from an expired lease
      local a, d = string.match(metas[i], '^(%d+):([^:]+):')
      if a then
        attempts, due = tonumber(a), d
      end
    end
    attempts = attempts + 1
    newmeta[#newmeta + 1] = key
    newmeta[#newmeta + 1] = attempts .. ':' .. due .. ':' .. ARGV[4]
    out[#out + 1] = key
    out[#out + 1] = attempts
    out[#out + 1] = due
  end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #keys - 1) -- the taken ones are the first by rank
  redis.call('HSET', KEYS[3], unpack(newmeta))
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
  redis.call('HSET', KEYS[4], ARGV[4], cmsgpack.pack(keys))
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 then
  out[1] = first[2]
end
return out
