--[[
reseed.lua: after Redis restarted or was restored from an older snapshot, lower a token bucket to
what one node knows of it, so the bucket's usage is the maximum of what Redis holds and what any
node knew, never their sum (the same bucket and fields as token-bucket.lua and lease.lua).

KEYS[1]  the bucket (hash; fields `l` = level in units, fractional; `t` = time of that level, ms
         since the epoch by Redis TIME). Also `b` / `bt` / `e`, written only here: the bucket's
         *base* (the level it would hold without the units taken since the restore; refilled like
         `l`), the restore epoch `e` it belongs to, and `s` = the Redis time of the epoch's first
         reseed of this bucket. A missing key is a full bucket; a field that
         is not a number is an empty bucket now (level 0), as in token-bucket.lua.
ARGV[1]  capacity: units the bucket holds when full (> 0)
ARGV[2]  refill rate: units per second (> 0)
ARGV[3]  known level: the level this node last saw in Redis after its own last write (units)
ARGV[4]  age ms: how long ago the node saw it (>= 0); refilled at the rate since, capped at capacity
ARGV[5]  epoch: names the restore (run_id and epoch id), the same on every node that saw it
ARGV[6]  ttl ms: the key's expiry, refreshed on every write; the key is kept at least until it
         would be full again, and deleted when the call leaves the bucket full

The base of a bucket first reseeded in this epoch is its level then (units taken from the restored
data before any node reseeded it are counted as restored usage); each reseed lowers the base to
min(base, known level) and the level by as much, so units taken since the previous reseed stay
taken whatever order the nodes reseed in. A known level above the base changes nothing (a node
never raises usage, nor lowers it), nor does one seen after the epoch's first reseed (now − age ≥
`s` + 50 ms: it already counts what was taken since; the 50 ms cover the call's latency, so a level
seen before the first reseed is never taken for one seen after: what a level seen within 50 ms after
it counts is then subtracted twice, the safe side).

Reply: {before, after, base}, integers (floored units): the level before and after the call, and
  the base after it.

Clock: Redis TIME, so every caller shares one clock (needs effects replication: Redis >= 5).
]]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local known = tonumber(ARGV[3])
local age = tonumber(ARGV[4])
local epoch = ARGV[5]
local ttl = tonumber(ARGV[6])
if not (capacity and rate and known and age and ttl and epoch) or rate <= 0 or age < 0 or epoch == '' then
  return redis.error_reply('ERR reseed.lua: bad arguments')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local state = redis.call('HMGET', KEYS[1], 'l', 't', 'b', 'bt', 'e', 's')
local level = tonumber(state[1])
local last = tonumber(state[2])
if not state[1] and not state[2] then
  level, last = capacity, now
elseif level == nil or last == nil or level ~= level or last ~= last then
  level, last = 0, now
else
  level = math.max(-capacity, math.min(capacity, level))
  if last > now then last = now end
end
if now > last then level = math.min(capacity, level + (now - last) * rate / 1000) end

local base = level
local since = now
local b = tonumber(state[3])
local bt = tonumber(state[4])
local s = tonumber(state[6])
if state[5] == epoch and b ~= nil and bt ~= nil and s ~= nil and b == b and bt == bt and s == s then
  if bt > now then bt = now end
  base = math.max(level, math.min(capacity, b + (now - bt) * rate / 1000))
  since = math.min(s, now)
end

local ceiling = math.max(-capacity, math.min(capacity, known + age * rate / 1000))
local before = level
if now - age < since + 50 and ceiling < base then
  level = math.max(-capacity, level - (base - ceiling))
  base = ceiling
end

if level >= capacity then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'l', level, 't', now, 'b', base, 'bt', now, 'e', epoch, 's', since)
  local keep = math.min(math.max(ttl, math.ceil((capacity - level) * 1000 / rate)), 1099511627776)
  redis.call('PEXPIRE', KEYS[1], string.format('%d', keep))
end
return {math.floor(before), math.floor(level), math.floor(base)}
