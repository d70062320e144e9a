package redis

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each store operation is one script call (EVALSHA), which
// Redis runs atomically.
//
// A lease is a plain string with a PX expiry:
//
//	<token>:<ttl ms>:<owner>
//
// The token and the TTL are decimal digits, so the owner string (which may
// hold any byte but NUL) is everything after the second colon. A key of
// the layout before this one (a hash {owner, token, ttl}, written by
// earlier versions of tenure) is read as a lease as well, so that leases
// taken by a process not yet upgraded keep excluding; see oldHash.
//
// Tokens: max(counter + 1, the server's clock in microseconds since the
// Unix epoch), from one counter per store (KEYS[2], no expiry). Lua
// numbers are doubles: exact for integers below 2^53 (about year 2255 in
// microseconds), which the scripts check.
//
// Answers that name a holder are {value, pttl}, value in the string layout
// above whatever the key's type, pttl in milliseconds.

// luaOldHash reads a key that holds something other than a string: an
// old-layout lease hash is returned as a value in the string layout, a
// partial one (owner or token missing) as false after deleting it (it can
// be nobody's lease: earlier versions wrote owner and token together), any
// other type is an error that says how to repair it.
const luaOldHash = `
local function oldHash(k)
	local t = redis.call('TYPE', k).ok
	if t ~= 'hash' then
		return redis.error_reply('tenure: key ' .. k .. ' holds a ' .. t .. ', not a lease; delete it (DEL) to free the resource')
	end
	local h = redis.call('HMGET', k, 'owner', 'token', 'ttl')
	if h[1] and h[2] then
		return h[2] .. ':' .. (h[3] or '0') .. ':' .. h[1]
	end
	redis.call('DEL', k)
	return false
end
`

// luaHolder returns {v, pttl} for the live lease value v in key k, giving
// back the key's expiry from its recorded TTL when it has none (PERSIST by
// hand, or a tool that wrote it): a lease never lives forever.
const luaHolder = `
local function holder(k, v)
	local pttl = redis.call('PTTL', k)
	if pttl == -1 then
		local ttl = tonumber(string.match(v, '^%d+:(%d+):'))
		if ttl and ttl > 0 then
			redis.call('PEXPIRE', k, ttl)
			pttl = ttl
		end
	end
	return {v, pttl}
end
`

// luaRenewOne extends lease k when its value is exp (token:ttl:owner with
// the new TTL), or when only the TTL differs. It returns 1 when renewed, 0
// when no lease is live, {v, pttl} when another grant holds it.
const luaRenewOne = `
local function renewOne(k, exp, ttl)
	local v = redis.pcall('GET', k)
	if v == exp then
		redis.call('PEXPIRE', k, ttl)
		return 1
	end
	if type(v) == 'table' then
		if v.err and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
			return v
		end
		v = oldHash(k)
		if type(v) == 'table' then return v end
	end
	if not v then return 0 end
	local tok, owner = string.match(v, '^(%d+):%d+:(.*)$')
	if not tok then return 0 end
	local etok, eowner = string.match(exp, '^(%d+):%d+:(.*)$')
	if tok == etok and owner == eowner then
		redis.call('SET', k, exp, 'PX', ttl)
		return 1
	end
	return holder(k, v)
end
`

// luaGrant is the grant of a free resource: the next token, and the lease.
// KEYS[2] is the counter. With compat, KEYS[4] is the resource's counter
// of the old layout: kept in step, so that a process not yet upgraded
// grants above this token.
const luaGrant = `
local function grant(compat)
	local t = redis.call('TIME')
	local tok = t[1] * 1000000 + t[2]
	local c = tonumber(redis.call('GET', KEYS[2]))
	if c and c >= tok then tok = c + 1 end
	if compat then
		local o = tonumber(redis.call('GET', KEYS[4]))
		if o and o >= tok then tok = o + 1 end
	end
	if tok >= 9007199254740992 then
		return redis.error_reply('tenure: the fencing-token counter ' .. KEYS[2] .. ' is beyond 2^53')
	end
	local s = string.format('%d', tok)
	redis.call('SET', KEYS[2], s)
	if compat and redis.call('EXISTS', KEYS[4]) == 1 then
		redis.call('SET', KEYS[4], s)
	end
	redis.call('SET', KEYS[1], s .. ':' .. ARGV[2] .. ':' .. ARGV[1], 'PX', ARGV[2])
	return tok
end
`

// waitTTLms is the life of a wait key, in milliseconds (see waitTTL).
var waitTTLms = strconv.FormatInt(waitTTL.Milliseconds(), 10)

// acquireBody: KEYS: lease, counter, wait key[, old counter]. ARGV: owner,
// ttl ms, "w" when the caller waits for this resource (then a lease found
// held sets the wait key, so that its release publishes). Returns the
// token (an integer) when granted or when this owner already holds it
// (renewed), or {value, pttl} of the holder.
var acquireBody = `
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
	if v.err and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
		return v
	end
	v = oldHash(KEYS[1])
	if type(v) == 'table' then return v end
end
if v then
	local tok, ttl, owner = string.match(v, '^(%d+):(%d+):(.*)$')
	if tok then
		if owner == ARGV[1] then
			if ttl == ARGV[2] then
				redis.call('PEXPIRE', KEYS[1], ARGV[2])
			else
				redis.call('SET', KEYS[1], tok .. ':' .. ARGV[2] .. ':' .. owner, 'PX', ARGV[2])
			end
			return tonumber(tok)
		end
		if ARGV[3] == 'w' then
			redis.call('SET', KEYS[3], '1', 'PX', ` + waitTTLms + `)
		end
		return holder(KEYS[1], v)
	end
	-- Not a lease (written by something else): the resource is free.
end
`

var (
	acquireScript = redis.NewScript(luaOldHash + luaHolder + luaGrant + acquireBody + `
return grant(false)`)

	// acquireCompatScript also keeps the old layout's per-resource counter
	// (KEYS[4]) in step while processes of an earlier version may run.
	acquireCompatScript = redis.NewScript(luaOldHash + luaHolder + luaGrant + acquireBody + `
return grant(true)`)

	// KEYS: lease. ARGV: token:ttl:owner (the new TTL), ttl ms.
	renewScript = redis.NewScript(luaOldHash + luaHolder + luaRenewOne + `
return renewOne(KEYS[1], ARGV[1], ARGV[2])`)

	// KEYS: the leases. ARGV: for each, token:ttl:owner, then the TTLs.
	// Returns one answer per lease, as renew's.
	renewBatchScript = redis.NewScript(luaOldHash + luaHolder + luaRenewOne + `
local n = #KEYS
local out = {}
for i = 1, n do
	local r = renewOne(KEYS[i], ARGV[i], ARGV[n + i])
	if type(r) == 'table' and r.err then
		r = {r.err}
	end
	out[i] = r
end
return out`)

	// KEYS: lease, wait key. ARGV: token, owner, channel, resource.
	// Returns 1 when released (and published when someone waits), 0 when
	// no lease is live, {value, pttl} when another grant holds it.
	releaseScript = redis.NewScript(luaOldHash + luaHolder + `
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
	if v.err and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
		return v
	end
	v = oldHash(KEYS[1])
	if type(v) == 'table' then return v end
end
if not v then return 0 end
local tok, owner = string.match(v, '^(%d+):%d+:(.*)$')
if not tok then return 0 end
if tok == ARGV[1] and owner == ARGV[2] then
	redis.call('DEL', KEYS[1])
	if redis.call('EXISTS', KEYS[2]) == 1 then
		redis.call('PUBLISH', ARGV[3], ARGV[4])
	end
	return 1
end
return holder(KEYS[1], v)`)

	// KEYS: leases. Returns, per key, {value, pttl}, or {} when no lease is
	// live there. Reads only (an expiry missing is reported as -1).
	getScript = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
	local v = redis.pcall('GET', k)
	if type(v) == 'table' then
		v = false
		if redis.call('TYPE', k).ok == 'hash' then
			local h = redis.call('HMGET', k, 'owner', 'token', 'ttl')
			if h[1] and h[2] then v = h[2] .. ':' .. (h[3] or '0') .. ':' .. h[1] end
		end
	end
	if v and string.match(v, '^%d+:%d+:') then
		out[i] = {v, redis.call('PTTL', k)}
	else
		out[i] = {}
	end
end
return out`)

	// KEYS: counter. ARGV: a token. Raises the counter to at least it.
	raiseScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]))
if not c or c < tonumber(ARGV[1]) then
	redis.call('SET', KEYS[1], ARGV[1])
end
return 1`)
)
