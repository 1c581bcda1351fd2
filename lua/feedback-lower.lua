--[[
feedback-lower.lua: lower a token bucket (the same bucket and fields as token-bucket.lua) toward
what the provider reports it has left, never raising it, with at most `allowance` units lowered in
any 60 s (provider feedback, src/globalcap/provider-feedback.ts).

KEYS[1]  the bucket (hash; fields `l` = level in units, fractional; `t` = time of that level, ms
         since the epoch by Redis TIME). A missing key is a full bucket. A field that is not a
         number (corrupt) leaves the bucket as it is (nothing lowered; token-bucket.lua repairs it).
         Read back clamped like token-bucket.lua: `l` to [-capacity, capacity], `t` to at most now.
KEYS[2]  the lowering log (hash; field = a second, floor(Redis TIME / 1000); value = units lowered
         in that second). Seconds older than 61 are deleted on each call; the key expires 61 s after
         its last write. A value that is not a number counts as the whole allowance (lowers nothing).
ARGV[1]  capacity: units the bucket holds when full (> 0)
ARGV[2]  refill rate: units per second (> 0)
ARGV[3]  target: the level to lower toward, units (clamped to [0, capacity])
ARGV[4]  allowance: most units lowered in any 60 s (>= 0); a second's units count while any part
         of that second lies within the last 60 s, so the bound holds over every 60 s interval
ARGV[5]  ttl ms: the bucket key's expiry, as in token-bucket.lua

Reply: {lowered, capped, level, used}, integers
  lowered  units taken off the bucket by this call, floored (0 when it held no more than target)
  capped   1 when the allowance stopped the call short of the target, else 0
  level    units in the bucket after the call, floored (negative while in debt)
  used     units lowered within the last 60 s, this call included, rounded up

Clock: Redis TIME (needs effects replication: Redis >= 5).
]]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local target = tonumber(ARGV[3])
local allowance = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
if not (capacity and rate and target and allowance and ttl) or rate <= 0 or capacity <= 0 or allowance < 0
  or target ~= target or allowance ~= allowance then
  return redis.error_reply('ERR feedback-lower.lua: bad arguments')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local state = redis.call('HMGET', KEYS[1], 'l', 't')
local level = tonumber(state[1])
local last = tonumber(state[2])
if not state[1] and not state[2] then
  level = capacity
  last = now
elseif level == nil or last == nil or level ~= level or last ~= last then
  return {0, 0, 0, 0}
else
  level = math.max(-capacity, math.min(capacity, level))
  if last > now then last = now end
end
if now > last then
  level = math.min(capacity, level + (now - last) * rate / 1000)
  last = now
end

-- The units lowered within the last 60 s, from the per-second log (stale seconds dropped).
local second = math.floor(now / 1000)
local used = 0
local log = redis.call('HGETALL', KEYS[2])
for i = 1, #log, 2 do
  local s = tonumber(log[i])
  local units = tonumber(log[i + 1])
  if s == nil or s <= second - 61 then
    redis.call('HDEL', KEYS[2], log[i])
  elseif units == nil or units ~= units or units < 0 then
    used = allowance
  else
    used = used + units
  end
end

target = math.max(0, math.min(capacity, target))
local want = level - target
if want <= 0 then
  return {0, 0, math.floor(level), math.ceil(used)}
end
local left = math.max(0, allowance - used)
local lower = math.min(want, left)
local capped = 0
if lower < want then capped = 1 end
if lower > 0 then
  level = level - lower
  redis.call('HSET', KEYS[1], 'l', level, 't', last)
  local keep = math.min(math.max(ttl, math.ceil((capacity - level) * 1000 / rate)), 1099511627776)
  redis.call('PEXPIRE', KEYS[1], string.format('%d', keep))
  redis.call('HINCRBYFLOAT', KEYS[2], tostring(second), lower)
  redis.call('PEXPIRE', KEYS[2], 61000)
  used = used + lower
end
return {math.floor(lower), capped, math.floor(level), math.ceil(used)}
