-- Make due messages ready: retries whose delay is over and messages
-- published for later whose time has come, in due order.
--
-- KEYS[1]  delayed set of the queue: retries (score: due time, ms, Redis clock)
-- KEYS[2]  scheduled set of the queue: published with a delay or a due time
-- KEYS[3]  pending list of the queue
-- KEYS[4]  priority set of the queue
-- KEYS[5]  priority sequence counter of the queue
-- KEYS[6]  dead-letter list of the queue (messages whose expiry has passed)
-- KEYS[7]  counters hash of the queue ("expired", "dead_lettered")
-- KEYS[8]  tracking hash of the queue, KEYS[9] its expiry set, KEYS[10] its
--          event stream
--          (includes/track.lua: a tracked message made ready is "waiting")
-- KEYS[11] its dependencies (includes/deps.lua: an end tells the children)
-- KEYS[12..17] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua)
-- KEYS[18] its ready times (includes/ready_at.lua): each message made
--          ready here is written with its due time, so that its lag counts
--          from it (lag.lua)
-- KEYS[19] its cancel set (includes/track.lua): a due retry whose cancel
--          was asked is dead-lettered "cancelled" (counted "cancelled"),
--          never made ready
-- KEYS[20] (optional) garbage-collector lock key
-- ARGV[1]  most messages to move in this call (integer > 0)
-- ARGV[2]  (with KEYS[20]) the caller's lock token; the script refuses to act
--          unless KEYS[20] holds exactly this token
--
-- Returns {moved, wait_ms, expired}: wait_ms is the time until the next
-- message of either set is due, or a group's rate wait ends (0 if more are due now, -1 if both are
-- empty); expired counts the due messages dead-lettered as "expired"
-- instead (their ttl passed while they waited). Error reply "NOTLEADER" when
-- the token check fails.
-- Order: the due messages of both sets are merged by due time (ties: retries
-- first), and made ready in that order (includes/ready.lua, make_ready_all),
-- so due messages of one priority come out in due order.
-- A key of the wrong type among KEYS[1, 2, 3, 4, 6] is an error reply
-- "WRONGTYPE ..." before anything is written (includes/wrong_type.lua).
local delayed, scheduled, pending, prio_set = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prio_seq, dead, counters, ready_at, lock_key = KEYS[5], KEYS[6], KEYS[7], KEYS[18], KEYS[20]
local T = {hash = KEYS[8], expiry = KEYS[9], events = KEYS[10], deps = KEYS[11], cancel = KEYS[19]}
local limit, token = tonumber(ARGV[1]), ARGV[2]
--- @include "lock"
--- @include "wrong_type"
--- @include "now_ms"
--- @include "ready"
--- @include "dead_letter"
--- @include "ready_at"
groups_use(12, pending, prio_seq)

local refused = not_leader(lock_key, token)
  or wrong_type({{delayed, 'zset'}, {scheduled, 'zset'}, {pending, 'list'}, {prio_set, 'zset'}, {dead, 'list'}})
if refused then return refused end
local at_ms = now_ms()
-- The collector's share of removing tracked records past their time (each end removes some too).
track_prune(T, at_ms)
local retries = redis.call('ZRANGEBYSCORE', delayed, '-inf', at_ms, 'WITHSCORES', 'LIMIT', 0, limit)
local planned = redis.call('ZRANGEBYSCORE', scheduled, '-inf', at_ms, 'WITHSCORES', 'LIMIT', 0, limit)
local r, p, expired, cancelled, ready, due = 1, 1, 0, 0, {}, {}
local cancels = #retries > 0 and redis.pcall('EXISTS', T.cancel) == 1
while #ready + expired + cancelled < limit and (retries[r] or planned[p]) do
  local set, frame, score
  if planned[p] == nil or (retries[r] and tonumber(retries[r + 1]) <= tonumber(planned[p + 1])) then
    set, frame, score, r = delayed, retries[r], retries[r + 1], r + 2
  else
    set, frame, score, p = scheduled, planned[p], planned[p + 1], p + 2
  end
  redis.call('ZREM', set, frame)
  local _, _, expires = head_of(frame)
  if cancels and set == delayed and end_if_cancelled(dead, counters, at_ms, frame, T) then
    cancelled = cancelled + 1
  elseif expires and expires > 0 and expires <= at_ms then
    dead_letter(dead, '{"reason":"expired"}', at_ms, frame, T)
    expired = expired + 1
  else
    ready[#ready + 1] = frame
    due[#due + 1] = score
  end
end
make_ready_all(pending, prio_set, prio_seq, ready)
ready_at_mark(ready_at, ready, due, at_ms)
track_all(T, ready, 'waiting', nil, at_ms)
if expired > 0 then
  redis.pcall('HINCRBY', counters, 'expired', expired)
  redis.pcall('HINCRBY', counters, 'dead_lettered', expired)
end
local wait_ms = -1
-- Groups whose rate wait is over get their tickets (consumers waiting on
-- an empty queue would not look).
group_wake()
local group_wait = group_next_wake()
if group_wait then wait_ms = math.min(math.floor(group_wait / 1000), 86400000) end
for _, set in ipairs({delayed, scheduled}) do
  local head = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if head[2] then
    -- At most a day: a score of +inf (anyone may ZADD it) must not
    -- overflow the integer it is returned as.
    local wait = math.min(math.max(0, tonumber(head[2]) - at_ms), 86400000)
    if wait_ms < 0 or wait < wait_ms then wait_ms = wait end
  end
end
return {#ready, wait_ms, expired}
