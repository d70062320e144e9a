package redis

import (
	"strings"
)

// The Lua scripts. Each store operation is one script call (EVALSHA), which
// Redis runs atomically.
//
// A lease is a plain string with a PX expiry:
//
//	<token>:<owner>:<ttl ms>[+]
//
// The token and the TTL are decimal digits, so the owner string (which may
// hold any byte but NUL, colons included) is what lies between the first
// and the last colon, and "<token>:<owner>:" followed by digits alone
// identifies a grant. The "+" at the end marks a lease that someone waits
// for: an acquire attempt of a waiter that finds the lease held adds it
// (and Watch does, for a holder watching its own lease), renewals keep
// it, and the release publishes when it is there. So a release nobody
// waits for publishes nothing, and the mark lives and dies with the lease.
// A key of the layout before this one (a hash {owner, token, ttl}, written
// by earlier versions of tenure) is read as a lease too, so that leases
// taken by a process not yet upgraded keep excluding.
//
// Tokens: max(counter + 1, the server's clock in microseconds since the
// Unix epoch), from one counter per store (KEYS[2], no expiry). Lua
// numbers are doubles: exact for integers below 2^53 (about year 2255 in
// microseconds), which the scripts check.
//
// Answers that name a holder are {value, pttl}: value in the string layout
// above whatever the key's type, pttl in milliseconds.
//
// The hot paths (a free resource, the holder's own renewal and release)
// call as few commands as they can and define no Lua function: the rare
// paths are written out where they are needed (see expand).

// oldHash is the rare path of a key that is not a string (the GET of @K
// answered an error): an old-layout lease hash becomes its value in the
// string layout (v); a partial one (owner or token missing: it can be
// nobody's lease, since earlier versions wrote them together) is deleted
// and v is false; any other type is an error that says how to repair it.
const oldHash = `
if type(v) == 'table' then
	if v.err and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
		return v
	end
	local typ = redis.call('TYPE', @K).ok
	if typ ~= 'hash' then
		return redis.error_reply('tenure: key ' .. @K .. ' holds a ' .. typ .. ', not a lease; delete it (DEL) to free the resource')
	end
	local h = redis.call('HMGET', @K, 'owner', 'token', 'ttl')
	if h[1] and h[2] then
		v = h[2] .. ':' .. h[1] .. ':' .. (h[3] or '0')
	else
		redis.call('DEL', @K)
		v = false
	end
end`

// holder answers {v, pttl} for the live lease value v in @K, giving the key
// back its expiry from the recorded TTL when it has none (PERSIST by hand,
// or a tool that wrote it): a lease never lives forever.
const holder = `
do
	local pttl = redis.call('PTTL', @K)
	if pttl == -1 then
		local ttl = tonumber(string.match(v, ':(%d+)%+?$'))
		if ttl and ttl > 0 then
			redis.call('PEXPIRE', @K, ttl)
			pttl = ttl
		end
	end
	return {v, pttl}
end`

// renewOne renews @K when its value is @E ("<token>:<owner>:<ttl>" with the
// new TTL @T), marked or not, or when only the TTL differs; @R is set to 1
// when renewed, 0 when no lease is live, {v, pttl} when another grant
// holds it (or an error reply).
const renewOne = `
do
	local v = redis.pcall('GET', @K)
	if v == @E then
		redis.call('PEXPIRE', @K, @T)
		@R = 1
	else
		@R = (function()
			@OLDHASH
			if not v or not string.find(v, '^%d+:.*:%d+%+?$') then return 0 end
			if v == @E .. '+' then
				redis.call('PEXPIRE', @K, @T)
				return 1
			end
			local p = string.sub(@E, 1, #@E - #@T)
			if string.find(v, p, 1, true) == 1 and string.find(v, '^%d+%+?$', #p + 1) then
				local mark = ''
				if string.byte(v, -1) == 43 then mark = '+' end
				redis.call('SET', @K, @E .. mark, 'PX', @T)
				return 1
			end
			@HOLDER
		end)()
	end
end`

// grant ends the grant of a free resource: the next token, and the
// lease @K. The script has read the clock into s (microseconds, decimal)
// and written the lease with s as its token when set is true. KEYS[2] is
// the counter: SET ... GET reads and writes it in one command where the
// server has it (Redis 6.2 and later), GET and SET where it does not. When
// the counter is at or above the clock, the token is counter + 1 and the
// lease is written again with it. @COMPAT: KEYS[3] is the resource's
// counter of the old layout, kept in step, so that a process not yet
// upgraded grants above this token.
const grant = `
local tok = tonumber(s)
local c = redis.pcall('SET', KEYS[2], s, 'GET')
if type(c) == 'table' then
	if c.err and string.find(c.err, 'WRONGTYPE', 1, true) then
		if set then redis.call('DEL', @K) end
		return c
	end
	c = redis.call('GET', KEYS[2])
	redis.call('SET', KEYS[2], s)
end
local craw = c
c = tonumber(c)
if c and c >= tok then tok = c + 1 end
if @COMPAT then
	local o = tonumber(redis.call('GET', KEYS[3]))
	if o and o >= tok then tok = o + 1 end
end
if tok >= 9007199254740992 then
	if set then redis.call('DEL', @K) end
	if craw then redis.call('SET', KEYS[2], craw) end
	return redis.error_reply('tenure: the fencing-token counter ' .. KEYS[2] .. ' is beyond 2^53')
end
if tok ~= tonumber(s) then
	s = string.format('%d', tok)
	redis.call('SET', KEYS[2], s)
	set = false
end
if @COMPAT and redis.call('EXISTS', KEYS[3]) == 1 then
	redis.call('SET', KEYS[3], s)
end
if not set then
	redis.call('SET', @K, s .. tail, 'PX', ARGV[2])
end
return tok`

// acquire: KEYS: lease, counter[, old counter]. ARGV: owner, ttl ms, "w"
// when this Store has subscribers waiting for the resource (then a lease
// found held is marked, so that its release publishes, and so is a lease
// granted, since the other subscribers still wait: a release wakes one
// waiter of each Store, and the others of that Store make no attempt that
// would mark the next lease. The Store cannot tell the caller's own
// subscription from another's, so the last waiter's lease is marked too,
// and its release publishes once for nobody). Returns the token (an
// integer) when granted or when this owner already holds it (renewed), or
// {value, pttl} of the holder.
//
// The lease is written first, if the key is free, with the clock as its
// token (SET NX GET, Redis 7.0 and later; GET and SET before), and the
// counter is read and written only then: an attempt that finds the
// resource held writes nothing (but the mark).
const acquire = `
local t = redis.call('TIME')
local s = t[1] .. string.format('%06d', t[2])
local w = ''
if ARGV[3] == 'w' then w = '+' end
local tail = ':' .. ARGV[1] .. ':' .. ARGV[2] .. w
local v = redis.pcall('SET', @K, s .. tail, 'NX', 'GET', 'PX', ARGV[2])
if type(v) == 'table' and v.err and not string.find(v.err, 'WRONGTYPE', 1, true) then
	v = redis.pcall('GET', @K)
	if not v then
		redis.call('SET', @K, s .. tail, 'PX', ARGV[2])
	end
end
local set = not v
if v then
	@OLDHASH
	if v then
		local tok, owner, ttl, mark = string.match(v, '^(%d+):(.*):(%d+)(%+?)$')
		if tok then
			if owner == ARGV[1] then
				if mark == '' then mark = w end
				redis.call('SET', @K, tok .. ':' .. owner .. ':' .. ARGV[2] .. mark, 'PX', ARGV[2])
				return tonumber(tok)
			end
			local pttl = redis.call('PTTL', @K)
			if pttl == -1 then
				pttl = tonumber(ttl)
				if pttl > 0 then redis.call('PEXPIRE', @K, pttl) end
			end
			if w ~= '' and mark == '' and pttl > 0 then
				redis.call('SET', @K, v .. '+', 'PX', pttl)
			end
			return {v, pttl}
		end
		-- Not a lease (written by something else): the resource is free.
	end
end
@GRANT`

// release: KEYS: lease. ARGV: "<token>:<owner>:", channel, resource. The
// value of this grant starts with ARGV[1] and holds no colon after it (the
// TTL's digits follow); a longer owner would.
// Returns 1 when released (and published when the lease was marked), 0
// when no lease is live, {value, pttl} when another grant holds it.
const release = `
local v = redis.pcall('GET', @K)
if type(v) == 'string' and string.find(v, ARGV[1], 1, true) == 1 and not string.find(v, ':', #ARGV[1] + 1, true) then
	redis.call('DEL', @K)
	if string.byte(v, -1) == 43 then
		redis.call('PUBLISH', ARGV[2], ARGV[3])
	end
	return 1
end
if not v then return 0 end
@OLDHASH
if not v or not string.find(v, '^%d+:.*:%d+%+?$') then return 0 end
@HOLDER`

// keep: KEYS: lease. ARGV: "<token>:<owner>:" of the grant (as release's),
// "<token>:<keeper>:<ttl ms>", ttl ms. Gives the lease of this grant to
// the keeper (its wait mark kept), expiring in ttl ms. Returns 1 when
// done, 0 when no lease is live, {value, pttl} when another grant holds it.
const keep = `
local v = redis.pcall('GET', @K)
if type(v) == 'string' and string.find(v, ARGV[1], 1, true) == 1 and not string.find(v, ':', #ARGV[1] + 1, true) then
	local mark = ''
	if string.byte(v, -1) == 43 then mark = '+' end
	redis.call('SET', @K, ARGV[2] .. mark, 'PX', ARGV[3])
	return 1
end
if not v then return 0 end
@OLDHASH
if not v or not string.find(v, '^%d+:.*:%d+%+?$') then return 0 end
@HOLDER`

// mark: KEYS: lease. Marks the live lease there, if any, as waited for.
const mark = `
local v = redis.pcall('GET', @K)
if type(v) == 'string' and string.find(v, '^%d+:.*:%d+$') then
	local pttl = redis.call('PTTL', @K)
	if pttl > 0 then
		redis.call('SET', @K, v .. '+', 'PX', pttl)
	end
end
return 1`

// expand fills the placeholders of a script: @K the lease key's
// expression, and the rare paths.
func expand(src, key string, more ...string) string {
	r := strings.NewReplacer(append([]string{
		"@OLDHASH", oldHash,
		"@HOLDER", holder,
		"@GRANT", grant,
	}, more...)...)
	// Twice: the rare paths hold placeholders of their own.
	return strings.ReplaceAll(r.Replace(r.Replace(src)), "@K", key)
}

var (
	acquireScript = newScript(expand(acquire, "KEYS[1]", "@COMPAT", "false"))

	// acquireCompatScript also keeps the old layout's per-resource counter
	// (KEYS[3]) in step while processes of an earlier version may run.
	acquireCompatScript = newScript(expand(acquire, "KEYS[1]", "@COMPAT", "true"))

	// KEYS: lease. ARGV: "<token>:<owner>:<ttl>" (the new TTL), ttl ms.
	renewScript = newScript(expand(`
local r
`+renewOne+`
return r`, "KEYS[1]", "@E", "ARGV[1]", "@T", "ARGV[2]", "@R", "r"))

	// KEYS: the leases. ARGV: for each, "<token>:<owner>:<ttl>", then the
	// TTLs, or one TTL for all. Returns one answer per lease, as renew's
	// (an error as {message}).
	renewBatchScript = newScript(expand(`
local n = #KEYS
local one = #ARGV == n + 1
local out = {}
for i = 1, n do
	local ttl = ARGV[n + 1]
	if not one then ttl = ARGV[n + i] end
	local r
`+renewOne+`
	if type(r) == 'table' and r.err then
		r = {r.err}
	end
	out[i] = r
end
return out`, "KEYS[i]", "@E", "ARGV[i]", "@T", "ttl", "@R", "r"))

	releaseScript = newScript(expand(release, "KEYS[1]"))

	keepScript = newScript(expand(keep, "KEYS[1]"))

	markScript = newScript(expand(mark, "KEYS[1]"))

	// KEYS: leases. Returns, per key, {value, pttl}, or {} when no lease is
	// live there. Reads only (an expiry missing is reported as -1).
	getScript = newScript(`
local out = {}
for i, k in ipairs(KEYS) do
	local v = redis.pcall('GET', k)
	if type(v) == 'table' then
		v = false
		if redis.call('TYPE', k).ok == 'hash' then
			local h = redis.call('HMGET', k, 'owner', 'token', 'ttl')
			if h[1] and h[2] then v = h[2] .. ':' .. h[1] .. ':' .. (h[3] or '0') end
		end
	end
	if v and string.find(v, '^%d+:.*:%d+%+?$') then
		out[i] = {v, redis.call('PTTL', k)}
	else
		out[i] = {}
	end
end
return out`)

	// KEYS: counter. ARGV: a token. Raises the counter to at least it.
	raiseScript = newScript(`
local c = tonumber(redis.call('GET', KEYS[1]))
if not c or c < tonumber(ARGV[1]) then
	redis.call('SET', KEYS[1], ARGV[1])
end
return 1`)
)
