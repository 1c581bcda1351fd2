--[[
token-bucket.lua: take (or give back) `cost` units from a token bucket kept in one hash.

KEYS[1]  the bucket (hash; fields `l` = level in units, fractional; `t` = time of that level, ms
         since the epoch by Redis TIME, fractional). A missing key is a full bucket. Read back
         clamped: `l` to [-capacity, capacity], `t` to at most now; a field missing or not a
         number (corrupt) is an empty bucket now (level 0); a clamped bucket is written back.
ARGV[1]  capacity: units the bucket holds when full (> 0)
ARGV[2]  refill rate: units per second (> 0)
ARGV[3]  cost: units to take; a negative cost gives units back (never above capacity)
ARGV[4]  floor: units only a call with floor 0 may take: a call with floor f never takes the level
         below f (0 <= f <= capacity; reserves the last share for higher priorities)
ARGV[5]  force: 1 takes the cost even when that drives the level below 0 (debt after a provider
         429) and answers allowed; 0 otherwise
ARGV[6]  ttl ms: the key's expiry, refreshed on every write; the key is kept at least until it
         would be full again, and deleted when the call leaves the bucket full

Reply: {allowed, wait_ms, level}, integers
  allowed  1 when the cost was taken (or given back), 0 when not (nothing taken)
  wait_ms  0 when allowed; else the ms until the cost fits above the floor, rounded up; -1 when it
           can never fit (cost > capacity - floor)
  level    units in the bucket after the call, floored (negative while in debt)

Clock: Redis TIME, so every caller shares one clock (needs effects replication: Redis >= 5).
]]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local floor = tonumber(ARGV[4])
local force = ARGV[5] == '1'
local ttl = tonumber(ARGV[6])
if not (capacity and rate and cost and floor and ttl) or rate <= 0 then
  return redis.error_reply('ERR token-bucket.lua: bad arguments')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local state = redis.call('HMGET', KEYS[1], 'l', 't')
local level = tonumber(state[1])
local last = tonumber(state[2])
-- Stored values are not trusted; one out of range is clamped and the bucket written back (repaired).
local repaired = false
if not state[1] and not state[2] then
  level = capacity
  last = now
elseif level == nil or last == nil or level ~= level or last ~= last then
  -- Not a number (corrupt): an empty bucket now, never a full one; noted in the Redis log.
  redis.log(redis.LOG_WARNING, 'token-bucket.lua: corrupt bucket ' .. KEYS[1] .. ', read as empty')
  level, last, repaired = 0, now, true
else
  -- The level within [-capacity, capacity] (at most one window of debt); the time at most now (a
  -- clock that went back, or a forged time, never holds the refill back).
  local l = math.max(-capacity, math.min(capacity, level))
  if l ~= level or last > now then repaired = true end
  level = l
  if last > now then last = now end
end
if now > last then
  level = math.min(capacity, level + (now - last) * rate / 1000)
  last = now
end

local allowed = 0
local wait = 0
if cost < 0 then
  level = math.min(capacity, level - cost)
  allowed = 1
elseif force or level - cost >= floor then
  level = level - cost
  allowed = 1
elseif cost > capacity - floor then
  wait = -1
else
  wait = math.ceil((floor + cost - level) * 1000 / rate)
end

if allowed == 1 or repaired then
  if level >= capacity then
    redis.call('DEL', KEYS[1])
  else
    redis.call('HSET', KEYS[1], 'l', level, 't', last)
    -- Kept until full again (capped at 2^40 ms, about 35 years), as an integer string for PEXPIRE.
    local keep = math.min(math.max(ttl, math.ceil((capacity - level) * 1000 / rate)), 1099511627776)
    redis.call('PEXPIRE', KEYS[1], string.format('%d', keep))
  end
end
return {allowed, wait, math.floor(level)}
