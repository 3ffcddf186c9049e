-- Give back, free of cost, frames a consumer took and never started: what
-- it prefetched, at a stop (graceful, scale-down, max_messages, a roll) or
-- when the queue turned out paused. Each leaves the consumer's list for the
-- consuming end of pending, so the queue's consumers take them next, ahead
-- of newer messages and in the order they were first taken.
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  tracking hash of the queue, KEYS[4] its expiry set, KEYS[5] its
--          event stream
--          (includes/track.lua: a tracked frame given back is "waiting")
-- KEYS[6..11] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua)
--          (a grouped frame frees its group's slot and goes back to the front
--          of its group; a ticket goes back as it is, unless its group was
--          paused since: group_turn_back)
-- ARGV[1..n] the frames, the exact bytes taken, in the order they were taken
--
-- Returns how many went back: a frame no longer in KEYS[1] (reclaimed
-- meanwhile, the consumer declared dead) is left alone, so another copy of
-- the message is never pushed twice.
-- A key of the wrong type among KEYS[1, 2] is an error reply "WRONGTYPE ..."
-- before anything is written (includes/wrong_type.lua): the frames then
-- stay in KEYS[1], where a reclaim finds them.
local processing, pending = KEYS[1], KEYS[2]
local T = {hash = KEYS[3], expiry = KEYS[4], events = KEYS[5]}
--- @include "wrong_type"
--- @include "track"
--- @include "groups"
groups_use(6, pending)

local refused = wrong_type({{processing, 'list'}, {pending, 'list'}})
if refused then return refused end
local given = 0
-- The newest first: the oldest lands last at the consuming end, so goes first.
for i = #ARGV, 1, -1 do
  if redis.call('LREM', processing, 1, ARGV[i]) > 0 then
    group_settled(ARGV[i])
    if is_ticket(ARGV[i]) then
      group_turn_back(ARGV[i], pending)
    elseif not group_ready(ARGV[i], true) then
      redis.call('RPUSH', pending, ARGV[i])
    end
    track(T, ARGV[i], 'waiting', 'returned')
    given = given + 1
  end
end
return given
