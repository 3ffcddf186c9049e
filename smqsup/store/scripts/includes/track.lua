--- @include "attempts"
--- @include "frame_id"
--- @include "deps"
-- The records of tracked messages, and the event streams of queues with
-- events on: a frame whose head is "A:P:E:R" with R > 0 (framing.py) keeps
-- its state and outcome until R seconds after it ended; one whose head is
-- "A:P:E:R:V" with V > 0 also adds each step of its life to its queue's
-- event stream, capped at about V entries. Both are written here by the
-- scripts that move it (store/ops/tracking.py and store/ops/events.py read them).
-- ``T`` is the script's tracking keys, or nil:
--
--   T.hash    HASH  field ID: the state record, JSON {"state", "attempts",
--                   "at_ms"} and, once it died, "meta" (the dead-letter
--                   metadata: "reason"...); field ID:r the result (JSON
--                   text); field ID:p its last progress (JSON text)
--   T.expiry  ZSET  ID, score = when its fields go (ms, Redis clock): R
--                   seconds after it ended. A reader takes a record past
--                   its time for gone; each end removes up to TRACK_PRUNE
--                   of those (the collector the rest)
--   T.events  STREAM (where a script has it) the queue's events: entries
--                   {event, id, attempts[, data]}, data a JSON text (the
--                   dead-letter metadata, or the progress); XADD MAXLEN ~ V
--
--   T.deps    ZSET  (where a script may end a message) the queue's
--                   dependencies (includes/deps.lua): an end tells them
--
--   T.cancel  ZSET  (where a script has it) ids of messages whose cancel was
--                   asked, score = when (ms): their consumers stop them
--                   (cancel.lua; the heartbeat finds them in consumers' lists).
--                   An id is added only while its message is in a consumer's
--                   list, and every script that takes a message out of one
--                   (ack, nack, reclaim, give-back, screen, promote) asks
--                   cancel_asked, which removes it: the mark lives exactly
--                   as long as its message, and a message marked never runs
--                   again (it is dead-lettered "cancelled")
--
-- Its end is published on the channel T.hash .. ":" .. ID (the state's
-- name), which a waiter subscribes to before it reads the record (the
-- states before the end are not: nobody waits on them).
-- Writes use redis.pcall: garbage in these keys costs the records or the
-- events, never the move of a message.
--
-- track(T, frame, state, event, at_ms, meta, result): record ``state`` for
-- the message of ``frame`` if it is tracked (its attempts read from the
-- head), and add ``event`` (nil: none) to the stream if its head says so;
-- at_ms nil: now. track_all(T, frames, state, event, at_ms): the same for
-- each.
local TRACK_PRUNE = 16
local TRACK_ENDS = {done = true, dead = true, cancelled = true}

-- The id, result_ttl (s), attempts, event stream cap and link flag of a
-- frame that is tracked, has events or is linked, or nil (a plain frame: at
-- once).
local function tracked_of(frame)
  if string.byte(frame, 2) == 124 then return nil end  -- "A|": plain
  local attempts, _, _, _, ttl, events_max, linked = head_of(frame)
  if not ttl or (ttl == 0 and events_max == 0 and linked == 0) then return nil end
  local id = frame_id(frame)
  if not id then return nil end
  return id, ttl, attempts, events_max, linked
end

-- Add ``event`` of message ``id`` to T.events, capped at about ``cap``.
local function add_event(T, cap, event, id, attempts, data)
  if not T.events then return end
  if data then
    redis.pcall('XADD', T.events, 'MAXLEN', '~', cap, '*', 'event', event, 'id', id,
                'attempts', string.format('%d', attempts), 'data', data)
  else
    redis.pcall('XADD', T.events, 'MAXLEN', '~', cap, '*', 'event', event, 'id', id,
                'attempts', string.format('%d', attempts))
  end
end

-- Whether the cancel of ``frame``'s message was asked (T.cancel); if so it
-- leaves the cancel set (the caller dead-letters it "cancelled"). One ZREM:
-- the question and the clean-up at once (garbage in T.cancel: no).
local function cancel_asked(T, frame)
  if not T or not T.cancel then return false end
  local id = frame_id(frame)
  return id ~= nil and redis.pcall('ZREM', T.cancel, id) == 1
end

local function track_prune(T, at_ms)
  local gone = redis.pcall('ZRANGEBYSCORE', T.expiry, '-inf', at_ms, 'LIMIT', 0, TRACK_PRUNE)
  if type(gone) ~= 'table' or #gone == 0 then return end
  local fields = {}
  for _, id in ipairs(gone) do
    fields[#fields + 1] = id
    fields[#fields + 1] = id .. ':r'
    fields[#fields + 1] = id .. ':p'
  end
  redis.pcall('HDEL', T.hash, unpack(fields))
  redis.pcall('ZREM', T.expiry, unpack(gone))
end

local function track(T, frame, state, event, at_ms, meta, result)
  if not T then return end
  local id, ttl, attempts, events_max, linked = tracked_of(frame)
  if not id then return end
  if event and events_max > 0 then add_event(T, events_max, event, id, attempts, meta) end
  if TRACK_ENDS[state] then
    deps_ended(T, id, state, result or meta, ttl > 0, linked)
  elseif state == 'active' and linked > 0 then
    deps_started(T, id, linked)
  end
  if ttl == 0 then return end
  if not at_ms then
    local t = redis.call('TIME')
    at_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local record = '{"state":"' .. state .. '","attempts":' .. string.format('%d', attempts)
    .. ',"at_ms":' .. string.format('%d', at_ms)
  if meta then record = record .. ',"meta":' .. meta end
  record = record .. '}'
  if result then
    redis.pcall('HSET', T.hash, id, record, id .. ':r', result)
  else
    redis.pcall('HSET', T.hash, id, record)
  end
  if TRACK_ENDS[state] then
    redis.pcall('ZADD', T.expiry, at_ms + ttl * 1000, id)
    track_prune(T, at_ms)
    redis.pcall('PUBLISH', T.hash .. ':' .. id, state)
  end
end

local function track_all(T, frames, state, event, at_ms)
  if not T then return end
  for _, frame in ipairs(frames) do track(T, frame, state, event, at_ms) end
end
