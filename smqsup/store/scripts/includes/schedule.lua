-- Shared by the schedule scripts (keys.py: ns:{Q}:schedule:NAME...).
--
-- ms_field(value): a stored time in ms as a number, or nil for anything that
-- is not one (absent, garbage, NaN, an infinity, absurdly far): anyone with
-- access may have written anything in a schedule's state hash.
--
-- declare(declarers, id, now, hold_ms): record that supervisor ``id``
-- declares the schedule until now + hold_ms, and forget declarations over
-- for more than a day (supervisors killed without a clean exit).
--
-- live_declarers(declarers, now): how many declarations hold now. A score
-- further ahead than any declaration can reach (a day: the longest
-- heartbeat_timeout) is nobody's and does not count.
local function ms_field(value)
  local n = tonumber(value)
  if n and n == n and n > -1e15 and n < 1e15 then return n end
  return nil
end

local DAY_MS = 86400000

local function declare(declarers, id, now, hold_ms)
  redis.call('ZADD', declarers, now + hold_ms, id)
  redis.call('ZREMRANGEBYSCORE', declarers, '-inf', '(' .. (now - DAY_MS))
end

local function live_declarers(declarers, now)
  return redis.call('ZCOUNT', declarers, '(' .. now, now + DAY_MS)
end
