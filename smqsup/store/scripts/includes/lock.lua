-- not_leader(lock_key, token): an error reply "NOTLEADER ..." unless the
-- garbage-collector lock holds exactly the caller's token, else nil (and nil
-- when lock_key is nil: a script whose lock is optional was given none).
--
-- Why in the script: a collector whose lock expired (paused, partitioned)
-- and was taken by another must not act on the same keys; the check and the
-- writes after it are one atomic step.
local function not_leader(lock_key, token)
  if lock_key and redis.call('GET', lock_key) ~= token then
    return redis.error_reply('NOTLEADER lock is not held by this token')
  end
  return nil
end
