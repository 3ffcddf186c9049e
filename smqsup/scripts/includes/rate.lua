-- rate_wait(rate): how long before the queue's rate limit lets the next
-- handler start (GCRA, by the Redis clock, in µs): wait (<= 0: now) and the
-- theoretical arrival time to store if that start is booked.
--
-- rate     nil (the queue has no limit), or {key = the queue's rate key,
--          interval = µs between starts (1e6 / limit per s), burst = starts
--          allowed back to back, >= 1}
--
-- rate_book(rate, tat, wait): book the start: store ``tat`` (expiring once
-- it is past, so an idle queue leaves no key behind).
--
-- GCRA: a start at time t is allowed when t >= tat - (burst - 1) * interval,
-- and moves tat to max(tat, t) + interval. A start is booked ahead when its
-- wait is at most RATE_HORIZON_US: the caller takes the frame now and its
-- consumer starts the handler ``wait`` later (the frame waits in the
-- consumer's own list, so a crash returns it). A longer wait books nothing
-- and takes nothing: the consumer looks again later. The key holding bytes
-- no script wrote counts as "no start yet" (pcall, tonumber): garbage there
-- costs the limit one burst, never a message.
local RATE_HORIZON_US = 1000000

local function rate_wait(rate)
  -- The clock is read once per script run (the rate table is the run's):
  -- the starts one take books are then exactly an interval apart, however
  -- long the script runs, and each wait is counted from a moment before the
  -- reply leaves, so no start comes early.
  if not rate.now then
    local t = redis.call('TIME')
    rate.now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local now = rate.now
  local tat = tonumber(redis.pcall('GET', rate.key))
  if not tat or tat ~= tat or tat == math.huge or tat == -math.huge then tat = now end
  local start = math.max(now, tat - (rate.burst - 1) * rate.interval)
  return start - now, math.max(tat, start) + rate.interval, now
end

local function rate_book(rate, tat, now)
  redis.pcall('SET', rate.key, string.format('%d', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
end
