--[[
state-read-bounded.lua: read tenants' stored limiter state (handoffs and checkpoints) without
transferring a value larger than a cap, in one round trip.

KEYS[1]    the cluster's state hash (field = tenant id, value = `<expiresAtMs> <snapshot JSON>`)
ARGV[1]    max: the largest value read whole, bytes
ARGV[2..]  the tenant ids to read

Reply: a list with one element per tenant, in ARGV order
  bulk string  the stored value, when its length is at most `max`
  integer      the value's length in bytes, when it is longer than `max` (the value is not sent)
  nil          no value stored
No time is read or written.
]]
local max = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local n = redis.call('HSTRLEN', KEYS[1], ARGV[i])
  if n > max then out[i - 1] = n else out[i - 1] = redis.call('HGET', KEYS[1], ARGV[i]) end
end
return out
