-- retry.lua: put a failed batch (its handler returned an error) back in due.
--
-- KEYS[1] -> <prefix>:{sNN}:due     ZSet: timer key -> Unix ms to deliver at
-- KEYS[2] -> <prefix>:{sNN}:lease   ZSet: claim id -> lease deadline, Unix ms
-- KEYS[3] -> <prefix>:{sNN}:meta    Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- KEYS[4] -> <prefix>:{sNN}:claims  Hash: claim id -> its timer keys (cmsgpack array)
-- ARGV[1] -> the claim id the batch was claimed with
-- ARGV[2], ARGV[3], ... -> pairs: a timer key, the Unix ms to deliver it again
--                         at (now plus its backoff)
--
-- Returns how many timers went back. Each keeps its attempt count and original
-- due time in meta; its claim id is cleared. A key this claim no longer holds
-- (scheduled again or unscheduled meanwhile, or recovered) is left alone: the
-- newer schedule wins. The claim's lease and entry in claims go.
local suffix = ':' .. ARGV[1]
local keys = {}
for i = 2, #ARGV, 2 do
  keys[#keys + 1] = ARGV[i]
end
local metas = redis.call('HMGET', KEYS[3], unpack(keys))
local due, meta = {}, {}
for i, key in ipairs(keys) do
  local v = metas[i]
  if v and string.sub(v, -#suffix) == suffix then
    due[#due + 1] = ARGV[2 * i + 1]
    due[#due + 1] = key
    meta[#meta + 1] = key
    meta[#meta + 1] = string.sub(v, 1, #v - #ARGV[1])
  end
end
if #due > 0 then
  redis.call('ZADD', KEYS[1], unpack(due))
  redis.call('HSET', KEYS[3], unpack(meta))
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return #due / 2
