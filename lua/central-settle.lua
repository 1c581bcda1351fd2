--[[
central-settle.lua: central-store mode's second call. Settles, releases, renews, or settles and
releases (`finish`, the gateway's end of a request) a reservation recorded by central-acquire.lua,
with the semantics of the in-RAM limiter's settle/release/renew (src/limiter/limiter.ts).

KEYS[1]        the tenant's reservations (hash, as in central-acquire.lua)
KEYS[2i], KEYS[2i+1]   limit i (1-based) of the tenant's current policy, laid out as in
               central-acquire.lua. Pass the `tokens` limits (settle) and the concurrency limits
               (release, renew); a limit acts only if the reservation names it.
ARGV[1]  op: `settle` | `release` | `renew` | `finish` (settle, then release)
ARGV[2]  request id
ARGV[3]  actual tokens (>= 0; ignored by release and renew)
ARGV[4]  n: number of limits
ARGV[5 + 4(i-1) ..]  limit i: type (`b` | `w` | `c`), limit (> 0), period ms (windowMs, or
         leaseTtlMs for `c`; > 0), name

Settle: applies delta = actual - reserved tokens to every named bucket (refilled first; a refund
never above capacity, a debit may go below 0) and to every named window's entry, in place at its
admission time (cost never below 0; nothing when the entry already left the window).
Release: frees the reservation's slot in every named semaphore. Renew: its live slots expire
leaseTtlMs from now and the reservation its ttl from now. A reservation settled and released is
deleted; an expired one is deleted and nothing changes.

Reply: {settled, delta, done}
  settled  1 when this call settled the reservation, else 0 (unknown, expired, already settled)
  delta    string: actual - reserved tokens when settled, else "0"
  done     release/finish: 1 when this call released it (else 0); renew: 1 when renewed; settle: 0

Clock: Redis TIME (effects replication: Redis >= 5).

Stored values are read back clamped as in central-acquire.lua (a bucket's u to [0, 2 × limit], its t
to at most now, not a number: used up; an entry's cost within [0, 2 × limit]); a bucket is refunded or
debited by the reservation's tokens clamped to its limit. A reservation record that does not
parse (corrupt) is deleted and answered as unknown.
]]
local op = ARGV[1]
local id = ARGV[2]
local actual = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
if (op ~= 'settle' and op ~= 'release' and op ~= 'renew' and op ~= 'finish') or id == nil or id == ''
    or not (actual and n) or actual < 0 or #ARGV ~= 4 + 4 * n or #KEYS ~= 1 + 2 * n then
  return redis.error_reply('ERR central-settle.lua: bad arguments')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local function fmt(x) return string.format('%.17g', x) end
-- A window entry's cost within [0, 2 × limit]; not a number (corrupt): limit (as central-acquire.lua).
local function costOf(member, limit)
  local c = tonumber(string.match(member, '^([^:]*)'))
  if c == nil or c ~= c then return limit end
  return math.max(0, math.min(2 * limit, c))
end

local rk = KEYS[1]
local rec = redis.call('HGET', rk, id)
if not rec then return {0, '0', 0} end
local xs, ttls, tks, us, s, r, namesJson = string.match(rec, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
local expiresAt, ttl, tk = tonumber(xs), tonumber(ttls), tonumber(tks)
if not (expiresAt and ttl and tk and namesJson) or tk ~= tk or tk < 0 then
  -- Corrupt: no reservation (its slots expire with their leases).
  redis.call('HDEL', rk, id)
  return {0, '0', 0}
end
if now >= expiresAt then
  redis.call('HDEL', rk, id)
  return {0, '0', 0}
end
local named = {}
local okNames, names = pcall(cjson.decode, namesJson)
if not okNames or type(names) ~= 'table' then
  redis.call('HDEL', rk, id)
  return {0, '0', 0}
end
for _, name in ipairs(names) do named[name] = true end

local settled, delta, done = 0, 0, 0
for i = 1, n do
  local b = 4 + 4 * (i - 1)
  local t = ARGV[b + 1]
  if (t ~= 'b' and t ~= 'w' and t ~= 'c') or not (tonumber(ARGV[b + 2]) and tonumber(ARGV[b + 3])) then
    return redis.error_reply('ERR central-settle.lua: bad limit ' .. i)
  end
end

if (op == 'settle' or op == 'finish') and s == '0' then
  delta = actual - tk
  if delta ~= 0 then
    for i = 1, n do
      local b = 4 + 4 * (i - 1)
      local t, limit, period, name = ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), ARGV[b + 4]
      local key = KEYS[2 * i]
      if named[name] and t == 'b' then
        local st = redis.call('HMGET', key, 'u', 't')
        local u, at = tonumber(st[1]), tonumber(st[2])
        -- Read back clamped, as in central-acquire.lua.
        if not st[1] and not st[2] then
          u, at = 0, now
        elseif u == nil or at == nil or u ~= u or at ~= at then
          u, at = limit, now
        else
          u, at = math.max(0, math.min(2 * limit, u)), math.min(at, now)
        end
        if now > at then
          if u > 0 then u = math.max(0, u - (now - at) * limit / period) end
          at = now
        end
        -- A reservation never holds more than a limit's capacity (too_large at admission).
        u = u + actual - math.min(tk, limit)
        if u <= 0 then
          redis.call('DEL', key)
        else
          redis.call('HSET', key, 'u', fmt(u), 't', fmt(at))
          local keep = math.min(math.max(1, math.ceil(u * period / limit)), 1099511627776)
          redis.call('PEXPIRE', key, string.format('%d', keep))
        end
      elseif named[name] and t == 'w' then
        local member = fmt(tk) .. ':' .. us .. ':' .. id
        local score = redis.call('ZSCORE', key, member)
        if score then
          local after = math.max(0, tk + delta)
          -- Removing the only member deletes the key (and its expiry): keep the expiry across.
          local pttl = redis.call('PTTL', key)
          redis.call('ZREM', key, member)
          redis.call('ZADD', key, score, fmt(after) .. ':' .. us .. ':' .. id)
          if pttl > 0 then redis.call('PEXPIRE', key, pttl) end
          local aux = KEYS[2 * i + 1]
          local sum = tonumber(redis.call('GET', aux))
          if sum == nil or sum ~= sum or sum < 0 or sum > redis.call('ZCARD', key) * 2 * limit then
            sum = 0
            for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do sum = sum + costOf(m, limit) end
          else
            sum = sum + math.min(after, 2 * limit) - math.min(tk, 2 * limit)
          end
          if pttl > 0 then redis.call('SET', aux, fmt(sum), 'PX', pttl) else redis.call('SET', aux, fmt(sum)) end
        end
      end
    end
  end
  s = '1'
  settled = 1
end

if (op == 'release' or op == 'finish') and r == '0' then
  for i = 1, n do
    local b = 4 + 4 * (i - 1)
    if ARGV[b + 1] == 'c' and named[ARGV[b + 4]] then redis.call('ZREM', KEYS[2 * i], id) end
  end
  r = '1'
  done = 1
end

if op == 'renew' and r == '0' then
  for i = 1, n do
    local b = 4 + 4 * (i - 1)
    local key = KEYS[2 * i]
    if ARGV[b + 1] == 'c' and named[ARGV[b + 4]] then
      local exp = tonumber(redis.call('ZSCORE', key, id))
      if exp and exp > now then
        local lease = tonumber(ARGV[b + 3])
        redis.call('ZADD', key, 'XX', fmt(now + lease), id)
        local pttl = redis.call('PTTL', key)
        if pttl < lease then redis.call('PEXPIRE', key, math.ceil(lease)) end
      end
    end
  end
  expiresAt = now + ttl
  done = 1
end

if s == '1' and r == '1' then
  redis.call('HDEL', rk, id)
elseif settled == 1 or done == 1 then
  redis.call('HSET', rk, id, table.concat({fmt(expiresAt), ttls, tks, us, s, r, namesJson}, '|'))
  local pttl = redis.call('PTTL', rk)
  if pttl < expiresAt - now then redis.call('PEXPIRE', rk, math.ceil(expiresAt - now)) end
end
return {settled, fmt(delta), done}
