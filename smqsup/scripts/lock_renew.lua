-- Renew a leader lock, only if the caller still holds it.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's owner token
-- ARGV[2]  new time to live in ms (integer > 0)
--
-- Returns 1 if renewed, 0 if the lock is gone or held by another token (the
-- caller is no longer the leader and must stop acting at once).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
