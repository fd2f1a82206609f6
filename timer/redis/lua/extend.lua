-- extend.lua: extend the lease of a batch whose handler is still running.
--
-- KEYS[1] -> <prefix>:{sNN}:lease  ZSet: timer key -> lease deadline, Unix ms
-- KEYS[2] -> <prefix>:{sNN}:meta   Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- ARGV[1] -> the claim id the batch was claimed with
-- ARGV[2] -> the new lease deadline, Unix ms
-- ARGV[3...] -> the timer keys of the batch
--
-- Returns how many leases were extended: only those this claim still holds.
local suffix = ':' .. ARGV[1]
local keys = {unpack(ARGV, 3)}
local metas = redis.call('HMGET', KEYS[2], unpack(keys))
local held = {}
for i, key in ipairs(keys) do
  local v = metas[i]
  if v and string.sub(v, -#suffix) == suffix then
    held[#held + 1] = ARGV[2]
    held[#held + 1] = key
  end
end
if #held == 0 then
  return 0
end
return redis.call('ZADD', KEYS[1], 'XX', 'CH', unpack(held))
