-- Release a leader lock, only if the caller holds it (compare-and-delete).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's owner token
--
-- Returns 1 if released, 0 if it was not the caller's to release.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
