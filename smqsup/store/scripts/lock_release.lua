-- Release a leader lock, only if the caller holds it (compare-and-delete).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's owner token
--
-- Returns 1 if released, 0 if it was not the caller's to release.
local lock_key = KEYS[1]
local token = ARGV[1]

if redis.call('GET', lock_key) == token then
  return redis.call('DEL', lock_key)
end
return 0
