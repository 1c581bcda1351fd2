--[[
central-acquire.lua: central-store mode's decision. One call admits a request against every limit
of a tenant that applies to it (token buckets, sliding windows, concurrency semaphores), all or
nothing, and records the reservation; or (op `peek`) reports the limits' state without taking.
Same semantics as the in-RAM limiter (src/limiter/limiter.ts, token-bucket.ts, sliding-window.ts,
semaphore.ts), with Redis TIME as the clock.

KEYS[1]        the tenant's reservations (hash; field = request id, value =
               `expiresAt|ttlMs|tokens|admittedUs|settled|released|<JSON array of limit names>`;
               field "" = the entry count above which an acquire sweeps expired reservations)
KEYS[2i], KEYS[2i+1]   limit i (1-based, policy order), by its type:
               bucket  KEYS[2i] hash {u = units used (capacity − level; > capacity after a
                       debit), t = ms of u}; a missing key is a full bucket (u = 0). Storing the
                       units used keeps a reload's usage, as the RAM limiter does.
                       KEYS[2i+1] unused (pass KEYS[2i]).
               window  KEYS[2i] sorted set of entries, member `<cost>:<admittedUs>:<request id>`,
                       score = admission ms; KEYS[2i+1] string: the sum of the entries' costs.
               conc    KEYS[2i] sorted set of slots, member = request id, score = lease expiry ms.
                       KEYS[2i+1] unused (pass KEYS[2i]).
ARGV[1]  op: `acquire` or `peek`
ARGV[2]  request id (non-empty)
ARGV[3]  concurrency retry hint ms (>= 0): a full semaphore contributes min(hint, earliest expiry)
ARGV[4]  reservation ttl ms (> 0)
ARGV[5]  tokens of the request (>= 0; stored for settlement)
ARGV[6]  n: number of limits
ARGV[7 + 5(i-1) ..]  limit i: type (`b` bucket | `w` window | `c` concurrency), limit (> 0),
         period ms (windowMs, or leaseTtlMs for `c`; > 0), cost (units; 1 for `c`), name

Reply: {code, index, retryAfterMs, remaining_1, resetMs_1, ..., remaining_n, resetMs_n}, integers
  code     1 admitted (or peek), 0 limited, 2 too_large, 3 duplicate
  index    1-based limit that refused (the first in order; 1 for duplicate); 0 when admitted
  retryAfterMs  limited: ms until every limit could admit the request, rounded up; else 0
  remaining_i   units (slots) available after the decision, floored, >= 0
  resetMs_i     ms until limit i is back to its initial state, rounded up

Clock: Redis TIME (effects replication: Redis >= 5). Entries, slots and reservations expire at
exactly the instants of the RAM limiter (entry ts <= now - window; lease/reservation expiry <= now).

Stored values are not trusted (docs/security.md): a bucket's u is clamped to [0, 2 × limit] and its
t to at most now (written back); u or t not a number is a bucket used up now. A window entry dated
after now is moved to now; an entry's cost is read within [0, 2 × limit] (not a number: limit); a
running sum not a number or out of [0, entries × 2 × limit] is recounted. A slot expiring after now + period is
moved to now + period. A reservation whose expiry is not a number is no reservation (swept).
]]
local op = ARGV[1]
local id = ARGV[2]
local hint = tonumber(ARGV[3])
local resTtl = tonumber(ARGV[4])
local tokens = tonumber(ARGV[5])
local n = tonumber(ARGV[6])
if (op ~= 'acquire' and op ~= 'peek') or id == nil or id == '' or not (hint and resTtl and tokens and n)
    or hint < 0 or resTtl <= 0 or tokens < 0 or #ARGV ~= 6 + 5 * n or #KEYS ~= 1 + 2 * n then
  return redis.error_reply('ERR central-acquire.lua: bad arguments')
end

local time = redis.call('TIME')
local nowUs = time[1] .. string.format('%06d', tonumber(time[2]))
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local function fmt(x) return string.format('%.17g', x) end
-- A window entry's cost, clamped to [0, 2 × limit] (a debit may take an entry above the limit, by
-- at most one window of debt, as a bucket's); not a number (corrupt): `limit`, the window full until
-- the entry leaves it.
local function costOf(member, limit)
  local c = tonumber(string.match(member, '^([^:]*)'))
  if c == nil or c ~= c then return limit end
  return math.max(0, math.min(2 * limit, c))
end
-- Durations are whole µs (TIME's resolution) plus float residue (~2e-4 ms at epoch scale): snap to
-- the µs before rounding up, so an exact 60000 ms never reads 60001.
local function ceilMs(x) return math.ceil(math.floor(x * 1000 + 0.5) / 1000) end

local types, limits, periods, costs, names = {}, {}, {}, {}, {}
for i = 1, n do
  local b = 6 + 5 * (i - 1)
  types[i] = ARGV[b + 1]
  limits[i] = tonumber(ARGV[b + 2])
  periods[i] = tonumber(ARGV[b + 3])
  costs[i] = tonumber(ARGV[b + 4])
  names[i] = ARGV[b + 5]
  local t = types[i]
  if (t ~= 'b' and t ~= 'w' and t ~= 'c') or not (limits[i] and periods[i] and costs[i])
      or limits[i] <= 0 or periods[i] <= 0 or costs[i] < 0 then
    return redis.error_reply('ERR central-acquire.lua: bad limit ' .. i)
  end
end

-- State of every limit at `now` (buckets refilled, windows and semaphores purged).
local used, last, sum, held = {}, {}, {}, {}
for i = 1, n do
  local key, t, limit, period = KEYS[2 * i], types[i], limits[i], periods[i]
  if t == 'b' then
    local st = redis.call('HMGET', key, 'u', 't')
    local u, at = tonumber(st[1]), tonumber(st[2])
    local repaired = false
    if not st[1] and not st[2] then
      u, at = 0, now
    elseif u == nil or at == nil or u ~= u or at ~= at then
      -- Not a number (corrupt): the bucket used up now (never a full one); noted in the Redis log.
      redis.log(redis.LOG_WARNING, 'central-acquire.lua: corrupt bucket ' .. key .. ', read as used up')
      u, at, repaired = limit, now, true
    elseif u < 0 or u > 2 * limit or at > now then
      -- Out of range: units used within [0, 2 × limit] (at most one window of debt), the time at
      -- most now (a forged time, or a clock that went back, never holds the refill back).
      u, at, repaired = math.max(0, math.min(2 * limit, u)), math.min(at, now), true
    end
    if now > at then
      -- Continuous refill at limit / period units per ms.
      if u > 0 then u = math.max(0, u - (now - at) * limit / period) end
      at = now
    end
    if repaired then
      -- Written back, so the bucket refills from here even if nothing is admitted.
      redis.call('HSET', key, 'u', fmt(u), 't', fmt(at))
      redis.call('PEXPIRE', key, math.max(1, math.ceil(u * period / limit)))
    end
    used[i], last[i] = u, at
  elseif t == 'w' then
    local aux = KEYS[2 * i + 1]
    local edge = fmt(now - period)
    local dirty = false
    -- An entry dated after now (forged, or a clock that went back) is moved to now: it leaves the
    -- window one period from now, not from its date.
    local future = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(now), '+inf')
    for _, m in ipairs(future) do redis.call('ZADD', key, 'XX', fmt(now), m) end
    if #future > 0 then dirty = true end
    local s = tonumber(redis.call('GET', aux))
    -- The stored sum, unless it is not a number or out of [0, entries × limit]: then recounted.
    if s == nil or s ~= s or s < 0 or s > redis.call('ZCARD', key) * 2 * limit then
      s = 0
      for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do s = s + costOf(m, limit) end
      dirty = true
    end
    local old = redis.call('ZRANGEBYSCORE', key, '-inf', edge)
    if #old > 0 then
      for _, m in ipairs(old) do s = s - costOf(m, limit) end
      redis.call('ZREMRANGEBYSCORE', key, '-inf', edge)
      dirty = true
    end
    if dirty then
      local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      if #newest == 0 then
        s = 0 -- exact reset, whatever float residue
        redis.call('DEL', aux)
      else
        redis.call('SET', aux, fmt(s), 'PX', math.max(1, math.ceil(tonumber(newest[2]) + period - now)))
      end
    end
    sum[i] = s
  else
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
    -- A slot expiring later than one lease from now (forged, or a clock that went back) expires then.
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. fmt(now + period), '+inf')) do
      redis.call('ZADD', key, 'XX', fmt(now + period), m)
    end
    held[i] = redis.call('ZCARD', key)
  end
end

local function states(code, index, retry)
  local out = {code, index, retry}
  for i = 1, n do
    local key, t, limit, period = KEYS[2 * i], types[i], limits[i], periods[i]
    local remaining, reset
    if t == 'b' then
      remaining = math.floor(limit - used[i])
      reset = used[i] * period / limit
    elseif t == 'w' then
      remaining = math.floor(limit - sum[i])
      local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      reset = #newest == 0 and 0 or tonumber(newest[2]) + period - now
    else
      remaining = limit - held[i]
      local latest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      reset = #latest == 0 and 0 or tonumber(latest[2]) - now
    end
    out[#out + 1] = math.max(0, remaining)
    out[#out + 1] = math.max(0, ceilMs(reset))
  end
  return out
end

if op == 'peek' then return states(1, 0, 0) end

local rk = KEYS[1]
local rec = redis.call('HGET', rk, id)
-- A record whose expiry is not a number (corrupt) is no reservation.
if rec and (tonumber(string.match(rec, '^([^|]*)')) or now) > now then return states(3, 1, 0) end

for i = 1, n do
  if types[i] ~= 'c' and costs[i] > limits[i] then return states(2, i, 0) end
end

local wait, first = 0, 0
for i = 1, n do
  local t, limit, period, cost = types[i], limits[i], periods[i], costs[i]
  local w = 0
  if t == 'b' then
    local need = used[i] + cost - limit
    if need > 0 then w = need * period / limit end
  elseif t == 'w' then
    local need = sum[i] + cost - limit
    if need > 0 then
      w = period
      local freed = 0
      local entries = redis.call('ZRANGE', KEYS[2 * i], 0, -1, 'WITHSCORES')
      for k = 1, #entries, 2 do
        freed = freed + costOf(entries[k], limit)
        if freed >= need then
          w = tonumber(entries[k + 1]) + period - now
          break
        end
      end
    end
  elseif held[i] >= limit then
    local earliest = redis.call('ZRANGE', KEYS[2 * i], 0, 0, 'WITHSCORES')
    w = math.min(hint, tonumber(earliest[2]) - now)
  end
  if w > 0 then
    if first == 0 then first = i end
    if w > wait then wait = w end
  end
end
if first > 0 then return states(0, first, math.max(1, ceilMs(wait))) end

-- Admit: take from every limit.
for i = 1, n do
  local key, t, limit, period, cost = KEYS[2 * i], types[i], limits[i], periods[i], costs[i]
  if t == 'b' then
    local u = used[i] + cost
    used[i] = u
    if u <= 0 then
      redis.call('DEL', key)
    else
      redis.call('HSET', key, 'u', fmt(u), 't', fmt(last[i]))
      -- Kept until full again (capped at 2^40 ms), as an integer string for PEXPIRE.
      local keep = math.min(math.max(1, math.ceil(u * period / limit)), 1099511627776)
      redis.call('PEXPIRE', key, string.format('%d', keep))
    end
  elseif t == 'w' then
    redis.call('ZADD', key, fmt(now), fmt(cost) .. ':' .. nowUs .. ':' .. id)
    sum[i] = sum[i] + cost
    local keep = math.max(1, math.ceil(period))
    redis.call('PEXPIRE', key, keep)
    redis.call('SET', KEYS[2 * i + 1], fmt(sum[i]), 'PX', keep)
  else
    redis.call('ZADD', key, fmt(now + period), id)
    held[i] = redis.call('ZCARD', key)
    local latest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', key, math.max(1, math.ceil(tonumber(latest[2]) - now)))
  end
end

redis.call('HSET', rk, id, table.concat({fmt(now + resTtl), fmt(resTtl), fmt(tokens), nowUs, '0', '0', cjson.encode(names)}, '|'))
local pttl = redis.call('PTTL', rk)
if pttl < resTtl then redis.call('PEXPIRE', rk, math.ceil(resTtl)) end
-- Reservations never settled and released (a crashed gateway) are swept once they outnumber the mark.
if redis.call('HLEN', rk) > (tonumber(redis.call('HGET', rk, '')) or 64) then
  local all = redis.call('HGETALL', rk)
  local live = 0
  for k = 1, #all, 2 do
    if all[k] ~= '' then
      if (tonumber(string.match(all[k + 1], '^([^|]*)')) or now) <= now then
        redis.call('HDEL', rk, all[k])
      else
        live = live + 1
      end
    end
  end
  redis.call('HSET', rk, '', math.max(64, 2 * live))
end
return states(1, 0, 0)
