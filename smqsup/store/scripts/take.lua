-- Take the next ready frames for a consumer, without blocking: after a
-- blocking fetch timed out, at start, after a reconnect, while the queue is
-- paused, and to fill a concurrent consumer up to its concurrency. The consumer blocks (BLMOVE on KEYS[2]) only
-- after this found nothing (includes/ready.lua says why that is safe).
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  counters hash of the queue ("expired", "dead_lettered")
-- KEYS[4]  consumers registry hash of the queue
-- KEYS[5]  priority set of the queue
-- KEYS[6]  paused flag of the queue
-- KEYS[7]  dead-letter list of the queue (expired frames)
-- KEYS[8]  rate key of the queue (includes/rate.lua)
-- KEYS[9]  partition count of the queue, this partition's copy (includes/rate.lua)
-- ARGV[1]  the consumer's id
-- ARGV[2]  most frames to take, 1 to 1000
-- ARGV[3]  the queue's rate limit: µs between handler starts across the
--          whole queue, "0" for none
-- ARGV[4]  its burst (>= 1)
-- ARGV[5]  partitions the consumer works (rate_of's ``known``)
--
-- Returns {registered, paused, wait, frame, start...}: registered and
-- paused as ack.lua says; wait: with a rate limit that allowed no start
-- now, µs before looking again (else 0); then each frame taken, in the
-- order they must be handled, with the µs its consumer must wait before
-- starting it (0 without a rate limit): none when the queue had none, is
-- paused, or the consumer is not registered.
-- A key of the wrong type among KEYS[1, 2, 4, 5] is an error reply
-- "WRONGTYPE ..." before anything is written (includes/wrong_type.lua). A
-- dead-letter list of the wrong type matters only to an expired frame: the
-- script then fails with that frame still in KEYS[1] (the consumer's
-- recovery finds it there), so consumption of the others goes on meanwhile.
local q = {processing = KEYS[1], pending = KEYS[2], counters = KEYS[3], consumers = KEYS[4],
           priority = KEYS[5], paused = KEYS[6], dead = KEYS[7]}
local consumer_id = ARGV[1]
local most = math.max(1, math.min(tonumber(ARGV[2]) or 1, 1000))
--- @include "wrong_type"
--- @include "fetch_next"
q.rate = rate_of(KEYS[8], KEYS[9], ARGV[3], ARGV[4], ARGV[5])

local refused = wrong_type({{q.processing, 'list'}, {q.pending, 'list'}, {q.consumers, 'hash'},
                           {q.priority, 'zset'}})
if refused then return refused end
local registered, nxt, paused, wait = fetch_next(redis.call, q, consumer_id, true)
local reply = {registered, paused, nxt and 0 or wait}
while nxt do
  reply[#reply + 1] = nxt
  reply[#reply + 1] = wait
  if (#reply - 3) / 2 >= most then break end
  registered, nxt, paused, wait = fetch_next(redis.call, q, consumer_id, true)
end
return reply
