-- Ack one message and, when asked, take the next one in the same round trip.
--
-- KEYS[1]  processing list of the acking consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  counters hash of the queue
-- KEYS[4]  consumers registry hash of the queue
-- KEYS[5]  priority set of the queue (ready frames of priority 1-9)
-- KEYS[6]  paused flag of the queue
-- KEYS[7]  dead-letter list of the queue (expired frames)
-- KEYS[8]  rate key of the queue (includes/rate.lua)
-- KEYS[9]  partition count of the queue, this partition's copy (includes/rate.lua)
-- KEYS[10] tracking hash of the queue, KEYS[11] its expiry set, KEYS[12] its
--          event stream (includes/track.lua)
-- KEYS[13] its dependencies (includes/deps.lua: an end tells the children)
-- KEYS[14..19] its group keys (includes/groups.lua: a grouped frame acked
--          frees its group's slot; a ticket taken is redeemed; KEYS[14..16]
--          ready, count, state)
-- KEYS[20] its cancel set (includes/track.lua): a message whose cancel was
--          asked is dead-lettered "cancelled" (into KEYS[7], counted
--          "cancelled", not "acked"), never "done"; the hot path reads it
--          in the EXISTS it makes anyway, so it costs nothing while no
--          message of the queue has a cancel pending
-- ARGV[1]  the frame being acked: the exact bytes the consumer fetched
-- ARGV[2]  "1": also take the next ready frame into KEYS[1]; "0": do not
-- ARGV[3]  the consumer's id
-- ARGV[4]  "1": count the ack in KEYS[3] "acked" (statistics on)
-- ARGV[5]  the queue's rate limit: µs between handler starts across the
--          whole queue, "0" for none
-- ARGV[6]  its burst (starts allowed back to back, >= 1)
-- ARGV[7]  partitions the consumer works (rate_of's ``known``)
-- ARGV[8..10] the queue's group limits (take.lua's ARGV[6..8])
-- ARGV[11] (a tracked message only) its result, JSON text: the record says
--          "done" with it, unless the ack was late
--
-- Returns {acked, next, registered, paused, wait[, told, ended]}
--   acked  1 if the frame was in KEYS[1] and is now gone; 0 if it was not
--          there (a late ack: the message was reclaimed, and is counted in
--          KEYS[3] "late_acks"; nothing else is touched, so another copy of
--          the message is never deleted)
--   next   the frame now at the left of KEYS[1], or false
--   registered  0 if the consumer is no longer in KEYS[4] (declared dead and
--          reclaimed): then nothing is fetched into a list no collector
--          watches, and the consumer must stop using this identity
--   paused 1 if the queue is paused (nothing is taken)
--   wait   µs to wait before starting ``next`` (rate limit), or before
--          looking again when the limit gave no start (includes/rate.lua)
--   told   (a tracked message's ack) its waiting children now in the
--          outbox of KEYS[13]: the consumer drains it (store/ops/workflows.py)
--   ended  (a batch member's ack) 1: its end is in that outbox for its
--          batch (store/ops/batches.py)
--
-- Invariant: LREM count 1 removes one copy from this consumer's own list and
-- nothing from any other list.
-- Keys of the wrong type lose nothing here, so this hot path pays no TYPE
-- check (unlike the scripts that move a message between keys): LREM is the
-- only write that matters and fails by itself on a KEYS[1] that is no list;
-- once it has run the message is acked, and a pending list or priority set
-- that is garbage only means nothing is fetched (redis.pcall: the consumer's
-- next BLMOVE reports the key). Counters use redis.pcall as well: a counters
-- hash that holds garbage costs its statistics, never the ack.
-- Runs once a message. The hot path (a plain frame acked, a registered
-- consumer, a queue with no rate limit, no priority set, no paused flag
-- and no cancel pending, a plain frame next) calls LREM, HINCRBY,
-- HEXISTS, EXISTS and LMOVE and returns before the includes below it
-- (after a grouped frame, the LMOVE rotates the pending list, and a
-- group's turn found there is redeemed inline: see below): their
-- local functions are created only when a script run reaches them, so a
-- plain queue does not pay for the priority and expiry helpers (about 2 us
-- of server time a message, measured).
local processing, pending, counters, consumers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local frame, wanted, consumer_id = ARGV[1], ARGV[2] == '1', ARGV[3]
local count = ARGV[4] == '1'
--- @include "plain"

local acked = redis.call('LREM', processing, '1', frame)  -- ('1': a Lua number is formatted with "%.14g")
if acked == 0 then
  redis.pcall('HINCRBY', counters, 'late_acks', 1)
elseif count then
  redis.pcall('HINCRBY', counters, 'acked', 1)
end
local result = ARGV[11]
local taken = nil
local limited = ARGV[5] ~= '0'
-- With no group limits (ARGV[8], ARGV[9]) a group-only frame ends as a
-- plain one does (includes/plain.lua), and a group's turn taken is
-- redeemed right after the hot path.
local light = ARGV[8] == '0' and ARGV[9] == '0'
local simple = plain(frame)
local grouped = not simple and light and string.find(frame, GROUP_ONLY_HEAD) ~= nil
-- Where a group's turn taken here is: the left end of KEYS[1] (moved there)
-- or of the pending list ("rotated": already back at the far end).
local rotated = false
if not result and (simple or grouped) then
  if redis.call('HEXISTS', consumers, consumer_id) == 0 then
    -- (declared dead: nothing is taken; a cancel pending is still honoured below)
    if acked == 0 or redis.pcall('EXISTS', KEYS[20]) ~= 1 then return {acked, false, 0, 0, 0} end
  elseif not limited and redis.call('EXISTS', KEYS[6], KEYS[5], KEYS[20]) == 0 then
    if not wanted then return {acked, false, 1, 0, 0} end
    if grouped then
      -- After a grouped frame the next item is most likely a group's turn,
      -- which goes back to the far end while its group has more: rotated
      -- there in one move. Anything else is moved on from there into KEYS[1]
      -- (in this script, so nothing came between: the order is kept).
      taken = redis.pcall('LMOVE', pending, pending, 'RIGHT', 'LEFT')
      rotated = type(taken) == 'string' and string.byte(taken, 1) == 42  -- '*'
      if type(taken) == 'string' and not rotated then redis.call('LMOVE', pending, processing, 'LEFT', 'LEFT') end
    else
      taken = redis.pcall('LMOVE', pending, processing, 'RIGHT', 'LEFT')
    end
    if type(taken) ~= 'string' then return {acked, false, 1, 0, 0} end
    if plain(taken) then return {acked, taken, 1, 0, 0} end
  end
end

-- A group's turn the hot path took, with no group limits, redeemed here
-- before any include below exists but group_firsts (inline: about 1 us
-- of server time a message less than the functions of group_turn.lua,
-- measured): its group's first
-- ready frame (KEYS[14], includes/groups.lua) goes where the turn was
-- taken to: replacing it at the left end of KEYS[1], or, the turn rotated,
-- pushed there while the turn stays at the far end of the pending list as
-- long as its group has more (else it leaves, with the group's state and
-- count entry). A turn with a frame to give is honoured without reading
-- its group's state (a read a message saved): a paused group has no turn
-- in the pending list (groups.lua's group_turn_out), and a second turn of
-- one group written by hand gives it extra turns until its frames run
-- out, never a frame twice. A turn with none is read: its state "t", it
-- ends and nothing is taken yet (the path below takes on); otherwise no
-- group gave it out, and the bytes, moved to the left end of KEYS[1],
-- stay taken for the path below to hand on (groups.lua's group_take).
--- @include "group_firsts"
if taken and light and string.byte(taken, 1) == 42 then  -- '*'
  local g = string.sub(taken, 2)
  local firsts, turned = group_firsts(KEYS[14], g)
  local more, ticket = false, true
  if turned then
    redis.pcall('ZREM', KEYS[14], firsts[1])
    more = firsts[2] ~= nil
  elseif redis.pcall('HGET', KEYS[16], 's:' .. g) ~= 't' then
    ticket = false
    if rotated then redis.call('LMOVE', pending, processing, 'LEFT', 'LEFT') end
  end
  if ticket then
    if not more then
      redis.pcall('HDEL', KEYS[16], 's:' .. g)
      redis.pcall('ZREM', KEYS[15], g)
    end
    if rotated then
      if not more then redis.call('LPOP', pending) end
      if turned then redis.call('LPUSH', processing, turned) end
    else
      if turned then redis.call('LSET', processing, '0', turned) else redis.call('LPOP', processing) end
      if more then redis.call('LPUSH', pending, '*' .. g) end
    end
    taken = turned
  end
  if taken and string.find(taken, GROUP_ONLY_HEAD) then return {acked, taken, 1, 0, 0} end
end

--- @include "fetch_next"
groups_use(14, pending, nil, ARGV[8], ARGV[9], ARGV[10])
local T = {hash = KEYS[10], expiry = KEYS[11], events = KEYS[12], deps = KEYS[13], cancel = KEYS[20]}
-- (a frame that is not plain ends here: its record, its event, its links,
-- its group's slot; one whose cancel was asked ends "cancelled")
if acked == 1 and end_if_cancelled(KEYS[7], counters, now_ms(), frame, T) then
  if count then redis.pcall('HINCRBY', counters, 'acked', -1) end  -- (counted above, before it was known)
  group_settled(frame)
elseif acked == 1 and (result or not plain(frame)) then
  track(T, frame, 'done', 'done', nil, nil, result or 'null')
  group_settled(frame)
end
local q = {processing = processing, pending = pending, counters = counters, consumers = consumers,
           priority = KEYS[5], paused = KEYS[6], dead = KEYS[7], track = T,
           rate = limited and rate_of(KEYS[8], KEYS[9], ARGV[5], ARGV[6], ARGV[7]) or nil}
local registered, nxt, paused, wait = fetch_next(redis.pcall, q, consumer_id, wanted, taken)
return {acked, nxt, registered, paused, wait, DEPS.told, DEPS.ended}
