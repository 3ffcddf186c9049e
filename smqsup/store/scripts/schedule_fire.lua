-- Fire one slot of one schedule: the elected collector's publish of its
-- message, at most once per (schedule, slot).
--
-- KEYS[1]  definitions hash of the queue (ns:{Q}:schedules)
-- KEYS[2]  the schedule's state hash
-- KEYS[3]  the schedule's declarers set
-- KEYS[4]  the schedule's paused flag
-- KEYS[5]  pending list of the queue
-- KEYS[6]  counters hash of the queue ("published")
-- KEYS[7]  the queue's garbage-collector lock
-- KEYS[8]  tracking hash of the queue, KEYS[9] its expiry set, KEYS[10] its
--          event stream (includes/track.lua: a tracked message fired is
--          "waiting"; one with events adds "published")
-- ARGV[1]  the caller's lock token: nothing is done unless KEYS[7] holds it
-- ARGV[2]  schedule name
-- ARGV[3]  SHA-1 (hex) of the definition the caller computed the slot from
-- ARGV[4]  the slot, in ms since the epoch
-- ARGV[5]  the message's frame ("0|" + payload, or a head with its queue's
--          result_ttl and events_max; its headers name the schedule and
--          the slot)
-- ARGV[6]  the message's id
-- ARGV[7]  "1": count it in KEYS[6] "published" (statistics on)
--
-- Returns {outcome, now_ms}: 1 fired; 0 already settled (the slot is not
-- after max(last_fire_ms, since_ms)); -1 not due (the slot is after now);
-- 2 paused; 3 no declaration holds; 4 the definition changed or is gone, or
-- the state has no since_ms (read again). Error reply "NOTLEADER" when the
-- token check fails, "WRONGTYPE ..." before any write when a key holds the
-- wrong type.
-- Exactly once: the check of last_fire_ms and its move to the slot are one
-- step with the push, so of any number of collectors (a deposed one is
-- refused by the token anyway) and retries, one publishes a given slot; and
-- the mark and the message reach the AOF together (one script), so a Redis
-- restart keeps both or neither.
local defs, state, declarers, paused, pending, counters, lock_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local token, name, digest, slot, frame, id, count =
  ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7] == '1'
--- @include "lock"
--- @include "wrong_type"
--- @include "now_ms"
--- @include "schedule"
--- @include "track"
local T = {hash = KEYS[8], expiry = KEYS[9], events = KEYS[10]}

local refused = not_leader(lock_key, token)
  or wrong_type({{defs, 'hash'}, {state, 'hash'}, {declarers, 'zset'}, {pending, 'list'}})
if refused then return refused end
local now = now_ms()
local def = redis.call('HGET', defs, name)
local since = ms_field(redis.call('HGET', state, 'since_ms'))
if not def or redis.sha1hex(def) ~= digest or not since then return {4, now} end
if redis.call('EXISTS', paused) == 1 then return {2, now} end
if live_declarers(declarers, now) == 0 then return {3, now} end
local last = ms_field(redis.call('HGET', state, 'last_fire_ms'))
if slot <= since or (last and slot <= last) then return {0, now} end
if slot > now then return {-1, now} end
redis.call('HSET', state, 'last_fire_ms', slot, 'fired_at_ms', now, 'last_id', id)
redis.pcall('HINCRBY', state, 'fires', 1)
redis.call('LPUSH', pending, frame)
track(T, frame, 'waiting', 'published', now)
if count then redis.pcall('HINCRBY', counters, 'published', 1) end
return {1, now}
