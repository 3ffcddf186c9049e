-- Unack one message: its handler failed. Count the attempt, then retry it
-- (at once or after a delay) or dead-letter it; optionally take the next one.
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  delayed sorted set of the queue (score: due time, ms, Redis clock)
-- KEYS[4]  dead-letter list of the queue
-- KEYS[5]  counters hash of the queue
-- KEYS[6]  consumers registry hash of the queue
-- ARGV[1]  the frame: the exact bytes the consumer fetched
-- ARGV[2]  retry_threshold: a message whose attempts would exceed it is
--          dead-lettered; -1 dead-letters at once (malformed messages)
-- ARGV[3]  retry delay in ms (integer, >= 0; 0 = back to pending at once)
-- ARGV[4]  dead-letter metadata: a JSON object text with at least "reason"
-- ARGV[5]  "1": also move the oldest pending frame into KEYS[1]
-- ARGV[6]  the consumer's id
--
-- Counts in KEYS[5]: "retried" (back to pending or delayed), "dead_lettered",
-- "late_acks".
-- Returns {outcome, next, registered}
--   outcome  0 late (the frame was not in KEYS[1]: reclaimed; nothing done),
--            1 back in pending, 2 delayed, 3 dead-lettered
--   next     the frame taken for the consumer, or false
--   registered  0 if the consumer is no longer in KEYS[6] (see ack.lua)
--
-- The payload bytes after '|' are copied, never decoded or re-encoded. The
-- attempt count stops at 999999999 (nine digits, what message.split_frame
-- reads), so a forged prefix cannot turn a frame into a malformed one.
-- A key of the wrong type among KEYS[1, 2, 3, 4, 6] is an error reply "WRONGTYPE ..."
-- before anything is written (includes/wrong_type.lua).
-- Counters use redis.pcall: a counters hash that holds garbage costs its
-- statistics, never the move of a message.
--- @include "wrong_type"
local refused = wrong_type({{KEYS[1], 'list'}, {KEYS[2], 'list'}, {KEYS[3], 'zset'},
                           {KEYS[4], 'list'}, {KEYS[6], 'hash'}})
if refused then return refused end
local removed = redis.call('LREM', KEYS[1], 1, ARGV[1])
local outcome = 0
if removed == 0 then
  redis.pcall('HINCRBY', KEYS[5], 'late_acks', 1)
else
  local frame = ARGV[1]
  local sep = string.find(frame, '|', 1, true)
  -- The prefix is 1 to 9 decimal digits, as message.split_frame() requires.
  local head = sep and string.sub(frame, 1, sep - 1)
  local attempts = head and #head <= 9 and string.match(head, '^%d+$') and tonumber(head) or nil
  local threshold = tonumber(ARGV[2])
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if attempts == nil then
    -- Not a frame at all: dead-letter the bytes as they are.
    outcome = 3
  else
    attempts = math.min(attempts + 1, 999999999)
    frame = string.format('%d', attempts) .. string.sub(frame, sep)
    if threshold < 0 or attempts > threshold then
      outcome = 3
    elseif tonumber(ARGV[3]) > 0 then
      outcome = 2
      redis.call('ZADD', KEYS[3], now_ms + tonumber(ARGV[3]), frame)
    else
      outcome = 1
      redis.call('LPUSH', KEYS[2], frame)
    end
    if outcome ~= 3 then
      redis.pcall('HINCRBY', KEYS[5], 'retried', 1)
    end
  end
  if outcome == 3 then
    local meta = '{"at_ms":' .. string.format('%d', now_ms) .. ',' .. string.sub(ARGV[4], 2)
    redis.call('LPUSH', KEYS[4], meta .. '\n' .. frame)
    redis.pcall('HINCRBY', KEYS[5], 'dead_lettered', 1)
  end
end
local registered = redis.call('HEXISTS', KEYS[6], ARGV[6])
local nxt = false
if ARGV[5] == '1' and registered == 1 then
  nxt = redis.call('LMOVE', KEYS[2], KEYS[1], 'RIGHT', 'LEFT')
end
return {outcome, nxt, registered}
