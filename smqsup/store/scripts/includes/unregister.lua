-- unregister(consumers, heartbeats, retired, consumer_id, at_ms): take the
-- consumer out of the registry and the heartbeats, and date its retirement.
--
-- retired  sorted set, score = ms when unregistered (Redis clock): the
--          collector keeps watching a retired consumer's list for a while, in
--          case it moves one more message there before it learns it was
--          declared dead (sweep_retired.lua)
local function unregister(consumers, heartbeats, retired, consumer_id, at_ms)
  redis.call('HDEL', consumers, consumer_id)
  redis.call('ZREM', heartbeats, consumer_id)
  redis.call('ZADD', retired, at_ms, consumer_id)
end
