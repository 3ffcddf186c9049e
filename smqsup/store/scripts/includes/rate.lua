-- rate_of(key, count_key, interval, burst, known): the rate table of one
-- partition of a queue (what rate_wait takes), or nil without a limit.
--
-- key        the partition's rate key (its GCRA state: the theoretical
--            arrival time, µs, Redis clock)
-- count_key  the partition's copy of the queue's partition count (keys.py:
--            ns:{P}:partitions; partition 0's is the count itself)
-- interval   ARGV text: µs between handler starts for the WHOLE queue, "0"
--            for no limit
-- burst      ARGV text: starts the whole queue allows back to back (>= 1)
-- known      ARGV text: how many partitions the calling consumer works
--
-- Each partition keeps an N-th of the queue's limit: interval * N between
-- its starts, a burst of ceil(burst / N). N is the larger of ``known`` and
-- the count stored in count_key, so a consumer that started before the
-- count was raised (or from a file that says fewer) still books the share
-- the others book, and the limit holds for the queue whatever count each
-- consumer was given. Junk in count_key (anything but a number from 1)
-- counts as ``known``; N is at most RATE_PARTITIONS_MAX.
--
-- rate_wait(rate): how long before the limit lets the next handler start
-- (GCRA, by the Redis clock, in µs): wait (<= 0: now), the theoretical
-- arrival time to store if that start is booked, and now.
--
-- rate_book(rate, tat, now): book the start: store ``tat`` (expiring once it
-- is past, so an idle queue leaves no key behind).
--
-- GCRA: a start at time t is allowed when t >= tat - (burst - 1) * interval,
-- and moves tat to max(tat, t) + interval. A start is booked ahead when its
-- wait is at most RATE_HORIZON_US: the caller takes the frame now and its
-- consumer starts the handler ``wait`` later (the frame waits in the
-- consumer's own list, so a crash returns it). A longer wait books nothing
-- and takes nothing: the consumer looks again later (at most
-- defaults.RATE_LOOK_MAX_S later, so it follows a raised limit or a
-- repaired key).
--
-- Every figure read from Redis is clamped before arithmetic: the stored tat
-- is at most now + RATE_HORIZON_US + burst * interval, the furthest a start
-- booked under this limit can put it. A later one was written under a
-- slower limit (the limit was raised since), by a clock that has since
-- stepped back, or by hand (1e300, inf): it is read, and stored again, as
-- that bound, so the limit in force decides from the next look, and no
-- wait can overflow the integer it is returned as. Bytes that are no number (NaN, text, a key of
-- another type) count as "no start yet": garbage costs the limit one
-- burst, never a message.
local RATE_HORIZON_US = 1000000
-- defaults.PARTITIONS_MAX
local RATE_PARTITIONS_MAX = 64

local function rate_of(key, count_key, interval, burst, known)
  local base = tonumber(interval) or 0
  if base <= 0 then return nil end
  return {key = key, count_key = count_key, base_interval = base, base_burst = math.max(1, tonumber(burst) or 1),
          known = math.max(1, math.min(math.floor(tonumber(known) or 1), RATE_PARTITIONS_MAX))}
end

-- The partition's share (rate.interval, rate.burst) and the clock, read
-- once per script run (the rate table is the run's): the starts one take
-- books are then exactly an interval apart, however long the script runs,
-- and each wait is counted from a moment before the reply leaves, so no
-- start comes early.
local function rate_read(rate)
  local t = redis.call('TIME')
  rate.now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local n = tonumber(redis.pcall('GET', rate.count_key))
  if not n or n ~= n or n < rate.known then n = rate.known end
  n = math.min(math.floor(n), RATE_PARTITIONS_MAX)
  rate.interval = rate.base_interval * n
  rate.burst = math.max(1, math.ceil(rate.base_burst / n))
end

local function rate_book(rate, tat, now)
  redis.pcall('SET', rate.key, string.format('%d', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
end

local function rate_wait(rate)
  if not rate.now then rate_read(rate) end
  local now = rate.now
  local tat = tonumber(redis.pcall('GET', rate.key))
  if not tat or tat ~= tat or tat == -math.huge then tat = now end
  local most = now + RATE_HORIZON_US + rate.burst * rate.interval
  if tat > most then
    -- Stored as the bound, so that time moves it closer: read as the bound
    -- at every look, it would stay one horizon ahead for ever.
    tat = most
    rate_book(rate, tat, now)
  end
  local start = math.max(now, tat - (rate.burst - 1) * rate.interval)
  return start - now, math.max(tat, start) + rate.interval, now
end
