--[[
epoch.lua: the global cap's epoch, which tells a node that Redis lost or regressed its data
(FLUSHALL, restarted empty, restored from an older snapshot or an older copy of the keys).

KEYS[1]  the epoch (hash; fields `id` = a random id drawn by the first node that found it missing,
         `n` = probes answered since, every node's probe adds 1)
ARGV[1]  a fresh random id, used when the epoch is missing or went back
ARGV[2]  the id this node saw at its last probe ('' when none)
ARGV[3]  the `n` this node saw at its last probe (0 when none)

The epoch goes back when it holds the id the node last saw with a smaller `n` than the node saw
(an older copy): it then gets the fresh id too, so every other node sees a new id at its next probe.

Reply: {id, n} (a string and an integer): the epoch after this probe. A node that sees another id
  than at its last probe knows Redis lost or regressed its data.

Clock: none (Redis TIME is not read; `n` counts probes).
]]
local fresh = ARGV[1]
local seenId = ARGV[2]
local seenN = tonumber(ARGV[3])
if fresh == nil or fresh == '' or seenId == nil or seenN == nil then
  return redis.error_reply('ERR epoch.lua: bad arguments')
end
local state = redis.call('HMGET', KEYS[1], 'id', 'n')
local id = state[1]
local n = tonumber(state[2])
if not id or n == nil or (id == seenId and n < seenN) then
  id = fresh
  n = 0
end
n = n + 1
redis.call('HSET', KEYS[1], 'id', id, 'n', n)
return {id, n}
