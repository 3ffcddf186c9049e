-- Acquire a leader lock: SET NX PX, and no lock that never expires.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's owner token
-- ARGV[2]  time to live in ms (integer > 0)
--
-- Returns 1 if the caller holds the lock now; 0 if another holder does; -1 if
-- the key held something with no time to live (garbage, or a value written by
-- hand, of any type): no holder ever leaves such a key, and it would keep
-- every process from leading for ever, so it is given ARGV[2] ms to live and
-- the election resumes when it expires.
local lock_key = KEYS[1]
local token, ttl_ms = ARGV[1], ARGV[2]

if redis.call('SET', lock_key, token, 'NX', 'PX', ttl_ms) then
  return 1
end
if redis.call('PTTL', lock_key) == -1 then
  redis.call('PEXPIRE', lock_key, ttl_ms)
  return -1
end
return 0
