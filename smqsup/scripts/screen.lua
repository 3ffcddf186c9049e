-- Look again at a frame a blocking fetch (BLMOVE) just moved into the
-- consumer's list, when the queue turned out paused or the frame carries an
-- expiry: give it back, dead-letter it, or let the consumer handle it.
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  dead-letter list of the queue
-- KEYS[4]  counters hash of the queue ("expired", "dead_lettered")
-- KEYS[5]  paused flag of the queue
-- ARGV[1]  the frame, the exact bytes fetched
--
-- Returns 0: handle it; 1: the queue is paused, the frame is back at the
-- consuming end of pending, free of cost (it never reached a handler);
-- 2: its expiry had passed, it is dead-lettered as "expired"; -1: it is not
-- in KEYS[1] any more (reclaimed meanwhile), nothing done.
-- A key of the wrong type among KEYS[1, 2] (and KEYS[3] for an expired
-- frame) is an error reply "WRONGTYPE ..." before anything is written
-- (includes/wrong_type.lua).
local processing, pending, dead, counters, paused = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local frame = ARGV[1]
--- @include "wrong_type"
--- @include "now_ms"
--- @include "attempts"
--- @include "dead_letter"

local refused = wrong_type({{processing, 'list'}, {pending, 'list'}})
if refused then return refused end
if redis.call('EXISTS', paused) == 1 then
  if redis.call('LREM', processing, 1, frame) == 0 then return -1 end
  redis.call('RPUSH', pending, frame)
  return 1
end
local _, _, expires = head_of(frame)
local at_ms = now_ms()
if not expires or expires == 0 or expires > at_ms then return 0 end
refused = wrong_type({{dead, 'list'}})
if refused then return refused end
if redis.call('LREM', processing, 1, frame) == 0 then return -1 end
dead_letter(dead, '{"reason":"expired"}', at_ms, frame)
redis.pcall('HINCRBY', counters, 'expired', 1)
redis.pcall('HINCRBY', counters, 'dead_lettered', 1)
return 2
