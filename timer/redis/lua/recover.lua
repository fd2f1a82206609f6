-- recover.lua: move the timers of claims whose lease expired (their consumer
-- died, or hung after its Run ended) back to due, to be claimed again at once.
--
-- KEYS[1] -> <prefix>:{sNN}:due     ZSet: timer key -> Unix ms to deliver at
-- KEYS[2] -> <prefix>:{sNN}:lease   ZSet: claim id -> lease deadline, Unix ms
-- KEYS[3] -> <prefix>:{sNN}:meta    Hash: timer key -> "<attempts>:<due ms>:<claim id>"
-- KEYS[4] -> <prefix>:{sNN}:claims  Hash: claim id -> its timer keys (cmsgpack array)
-- ARGV[1] -> now, Unix ms: a lease whose deadline <= now has expired
-- ARGV[2] -> about the most timers to look at (bounded, to keep Redis
--            responsive): claims are taken whole until this many timers
--            were looked at, so one call may look at a claim's size more
--
-- Returns {moved, more}: how many timers were moved, and 1 if expired claims
-- may be left (the bound was reached), else 0. Only the timers whose meta
-- still names the expired claim move (one scheduled again meanwhile is the
-- new schedule's); each keeps its attempt count and original due time in
-- meta, its claim id cleared, so the consumer that held it can no longer
-- acknowledge or requeue it. The claim's lease and entry in claims go.
--
-- A lease member without an entry in claims is a timer key leased by a lapse
-- before claims existed (one lease member per timer): it is moved back as
-- such, if meta shows it in flight and no claim of today's layout took it.
local limit = tonumber(ARGV[2])
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, limit)
local moved, looked = 0, 0
for _, id in ipairs(expired) do
  if looked >= limit then
    return {moved, 1}
  end
  local packed = redis.call('HGET', KEYS[4], id)
  local keys, suffix = {id}, ':' .. id -- without packed keys, id is a timer key (the old layout)
  if packed then
    keys = cmsgpack.unpack(packed)
  end
  looked = looked + #keys
  local metas = redis.call('HMGET', KEYS[3], unpack(keys))
  local due, meta = {}, {}
  for i, key in ipairs(keys) do
    local v = metas[i]
    local ours = false
    if v and packed then
      ours = string.sub(v, -#suffix) == suffix
    elseif v then -- the old layout: any claim but one of today's
      local holder = string.match(v, '^%d+:[^:]+:(.+)$')
      ours = holder ~= nil and redis.call('HEXISTS', KEYS[4], holder) == 0
    end
    if ours then
      local head = string.match(v, '^(%d+:[^:]+:)')
      if head then
        due[#due + 1] = ARGV[1]
        due[#due + 1] = key
        meta[#meta + 1] = key
        meta[#meta + 1] = head
      end
    end
  end
  if #due > 0 then
    redis.call('ZADD', KEYS[1], 'NX', unpack(due))
    redis.call('HSET', KEYS[3], unpack(meta))
    moved = moved + #due / 2
  end
  redis.call('ZREM', KEYS[2], id)
  if packed then
    redis.call('HDEL', KEYS[4], id)
  end
end
return {moved, #expired == limit and 1 or 0}
