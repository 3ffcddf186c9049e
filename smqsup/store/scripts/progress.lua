-- Record the progress a handler reported for a message that is tracked,
-- or whose queue has events on, or both.
--
-- KEYS[1]  tracking hash of the queue (includes/track.lua)
-- KEYS[2]  event stream of the queue (includes/track.lua)
-- ARGV[1]  the message's id
-- ARGV[2]  the progress, JSON text (bounded by the caller: PROGRESS_MAX_BYTES)
-- ARGV[3]  "1": the message is tracked (its head has a result_ttl); "0": not
-- ARGV[4]  its head's events_max (0: no events)
-- ARGV[5]  its attempts so far (what its head says)
--
-- Returns 1 when recorded; 0 when nothing was: a tracked message with no
-- record (gone) or one that has ended (a late report never follows its
-- outcome), or a message neither tracked nor with events. A tracked
-- message's report is published on its channel as "progress"; with events,
-- the stream gets a "progress" entry whose data is the value.
-- A tracking hash of the wrong type is an error reply "WRONGTYPE ...",
-- nothing written; an event stream of the wrong type costs the event.
local hash, id, value = KEYS[1], ARGV[1], ARGV[2]
local tracked, events_max = ARGV[3] == '1', tonumber(ARGV[4]) or 0
--- @include "track"
--- @include "record_state"
if tracked then
  local record = redis.call('HGET', hash, id)
  if not record then return 0 end
  local state = record_state(record)
  if state == 'done' or state == 'dead' or state == 'cancelled' then return 0 end
  redis.call('HSET', hash, id .. ':p', value)
  redis.call('PUBLISH', hash .. ':' .. id, 'progress')
end
if events_max > 0 then add_event({events = KEYS[2]}, events_max, 'progress', id, tonumber(ARGV[5]) or 0, value) end
return (tracked or events_max > 0) and 1 or 0
