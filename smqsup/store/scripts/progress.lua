-- Record the progress a handler reported for a tracked message.
--
-- KEYS[1]  tracking hash of the queue (includes/track.lua)
-- ARGV[1]  the message's id
-- ARGV[2]  the progress, JSON text (bounded by the caller: PROGRESS_MAX_BYTES)
--
-- Returns 1 when recorded; 0 when the message has no record (not tracked,
-- or gone) or has ended (a late report never follows its outcome). Each
-- report is published on the message's channel as "progress".
-- A tracking hash of the wrong type is an error reply "WRONGTYPE ...",
-- nothing written.
local hash, id, value = KEYS[1], ARGV[1], ARGV[2]
local record = redis.call('HGET', hash, id)
if not record then return 0 end
local state = string.match(record, '^{"state":"(%a+)"')
if state == 'done' or state == 'dead' or state == 'cancelled' then return 0 end
redis.call('HSET', hash, id .. ':p', value)
redis.call('PUBLISH', hash .. ':' .. id, 'progress')
return 1
