--[[
fair-demand.lua: one node's report of what its tenants ask of a fair-shared deployment, exchanged
for every live node's report in one call (src/fairshare/exchange.ts).

KEYS[1]  the deployment's demand hash: field = node id, value = "<ms>|<report>", where <ms> is the
         Redis TIME of the write and <report> the node's JSON (validated by the reader, never here)
ARGV[1]  this node's id (the field)
ARGV[2]  this node's report (a string of at most 1 MiB; empty: read only)
ARGV[3]  stale ms: a field older than this is deleted and not returned (> 0)

Reply: a flat array {node, age_ms, report, node, age_ms, report, ...} of every field younger than
stale ms (this node's own included), age_ms an integer.

Clock: Redis TIME, so every node shares one clock. The key expires 10 × stale ms after the last
write, so a deployment nobody reports on leaves nothing behind.
]]
local stale = tonumber(ARGV[3])
if not stale or stale <= 0 or #ARGV[2] > 1048576 then
  return redis.error_reply('ERR fair-demand.lua: bad arguments')
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if #ARGV[2] > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], now .. '|' .. ARGV[2])
  redis.call('PEXPIRE', KEYS[1], math.ceil(stale * 10))
end
local fields = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #fields, 2 do
  local value = fields[i + 1]
  local bar = string.find(value, '|', 1, true)
  local at = bar and tonumber(string.sub(value, 1, bar - 1))
  if not at or now - at > stale then
    redis.call('HDEL', KEYS[1], fields[i])
  else
    out[#out + 1] = fields[i]
    out[#out + 1] = math.max(0, now - at)
    out[#out + 1] = string.sub(value, bar + 1)
  end
end
return out
