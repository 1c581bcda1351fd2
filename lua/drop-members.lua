--[[
drop-members.lua: record members as dropped (their heartbeats stopped) only while they are still
silent, atomically against their heartbeats (issue 25, fencing).

KEYS[1]  the members sorted set (member: a signed member JSON `{"id":...,"url":...,"sig":...}`,
         score: its last heartbeat, ms of Redis time)
KEYS[2]  the drops hash (field: member id, value: the Redis time in ms of its drop)
ARGV[1]  min: an entry scored at least this (Redis time ms, the caller's now - deadAfterMs) is a
         live heartbeat
ARGV[2]  max: entries scored above this are not believed (the readers' window), ms
ARGV[3]  the drop time written for each id recorded, ms of Redis time
ARGV[4]  the drops hash's expiry, ms (renewed when an id is recorded)
ARGV[5]  most entries scanned in [min, max] (lowest scores first, as the readers read them)
ARGV[6..] the member ids to drop

An id is recorded unless an entry scanned has that `id` (the JSON is decoded with cjson; entries
that do not decode, or have no string id, count for nothing; the signature is not checked, Redis
has no secret). An id already in the hash is left as it is (its earlier drop time stays).

Reply: the ids among ARGV[6..] now in the drops hash (recorded by this call or before), in ARGV
  order; an id missing from the reply has a live heartbeat and was not dropped.

Clock: none read (the caller's Redis time is given in ARGV, as its read of the members used).
]]
local min = tonumber(ARGV[1])
local max = tonumber(ARGV[2])
local droppedAt = ARGV[3]
local ttl = tonumber(ARGV[4])
local scan = tonumber(ARGV[5])
if min == nil or max == nil or tonumber(droppedAt) == nil or ttl == nil or ttl <= 0 or scan == nil or scan < 1 then
  return redis.error_reply('ERR drop-members.lua: bad arguments')
end
local live = {}
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], min, max, 'LIMIT', 0, scan)
for _, entry in ipairs(entries) do
  local ok, value = pcall(cjson.decode, entry)
  if ok and type(value) == 'table' and type(value.id) == 'string' then live[value.id] = true end
end
local out = {}
local recorded = false
for i = 6, #ARGV do
  local id = ARGV[i]
  if redis.call('HEXISTS', KEYS[2], id) == 1 then
    out[#out + 1] = id
  elseif not live[id] then
    redis.call('HSET', KEYS[2], id, droppedAt)
    recorded = true
    out[#out + 1] = id
  end
end
if recorded then redis.call('PEXPIRE', KEYS[2], ttl) end
return out
