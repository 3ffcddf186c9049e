-- Renew a leader lock, only if the caller still holds it.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's owner token
-- ARGV[2]  new time to live in ms (integer > 0)
--
-- Returns 1 if renewed, 0 if the lock is gone or held by another token (the
-- caller is no longer the leader and must stop acting at once).
local lock_key = KEYS[1]
local token, ttl_ms = ARGV[1], ARGV[2]

if redis.call('GET', lock_key) == token then
  redis.call('PEXPIRE', lock_key, ttl_ms)
  return 1
end
return 0
