-- Cancel one message: dead-letter it "cancelled" if it still waits where it
-- was seen; otherwise, unless it is known to have ended, ask its consumer to
-- stop it (the cancel set: the supervisors' heartbeats find it in their
-- consumers' lists, and a reclaim dead-letters it instead of requeueing it).
--
-- KEYS[1]  pending list of the queue
-- KEYS[2]  priority set of the queue
-- KEYS[3]  scheduled set of the queue
-- KEYS[4]  delayed set of the queue (retries)
-- KEYS[5]  dead-letter list of the queue
-- KEYS[6]  counters hash of the queue ("cancelled", "dead_lettered")
-- KEYS[7]  tracking hash, KEYS[8] its expiry set, KEYS[9] the cancel set,
--          KEYS[10] the event stream
-- KEYS[11] its dependencies (includes/deps.lua: an end tells the children)
--          (includes/track.lua)
-- KEYS[12], KEYS[13] its groups' ready set and counts (includes/groups.lua)
-- KEYS[14] (ARGV[2] "processing") the list of the consumer it was seen in
-- ARGV[1]  the message's id
-- ARGV[2]  where it was seen: "pending", "priority", "scheduled", "delayed",
--          "group" (its group's ready set), "processing" (a consumer's
--          list), or "" (nowhere)
-- ARGV[3]  the frame seen there ("" when nowhere; its member for "group")
--
-- Returns "cancelled" (it waited: dead-lettered now), "stopping" (in
-- KEYS[14] now, or a tracked message not ended: its consumer stops it), the
-- state it ended in ("done", "dead", "cancelled": a tracked message),
-- "moved" (seen in KEYS[14] or waiting, not there now: the caller looks
-- again), or "unknown" (seen nowhere, no record: finished untracked, or
-- never was; a record that is garbage counts as none: includes/record_state).
-- Asking twice is harmless.
-- The cancel set gets an id only while its message is in a consumer's list
-- (KEYS[14], checked here) or, tracked, has not ended: every script that
-- takes a message out of a consumer's list ends it "cancelled" and removes
-- the id (includes/track.lua), so a cancel lasts as long as its message,
-- however long its retries wait, and no id is left behind by a message
-- that ended between the caller's look and this script.
-- A key of the wrong type among KEYS[1..5] is an error reply "WRONGTYPE ..."
-- before anything is written; the others' garbage costs records only.
local where = {pending = KEYS[1], priority = KEYS[2], scheduled = KEYS[3], delayed = KEYS[4]}
local dead, counters = KEYS[5], KEYS[6]
local T = {hash = KEYS[7], expiry = KEYS[8], cancel = KEYS[9], events = KEYS[10], deps = KEYS[11]}
local id, seen, frame = ARGV[1], ARGV[2], ARGV[3]
--- @include "wrong_type"
--- @include "now_ms"
--- @include "dead_letter"
--- @include "groups"
--- @include "withdraw"
--- @include "record_state"
groups_use_ready(KEYS[12], KEYS[13])

local refused = wrong_type({{KEYS[1], 'list'}, {KEYS[2], 'zset'}, {KEYS[3], 'zset'}, {KEYS[4], 'zset'},
                           {dead, 'list'}})
if refused then return refused end
local at_ms = now_ms()
local removed
removed, frame = withdraw(where, seen, frame)
if removed > 0 then
  dead_letter(dead, '{"reason":"cancelled"}', at_ms, frame, T)
  redis.pcall('HINCRBY', counters, 'cancelled', 1)
  redis.pcall('HINCRBY', counters, 'dead_lettered', 1)
  return 'cancelled'
end
local state = record_state(redis.pcall('HGET', T.hash, id))
if state == 'done' or state == 'dead' or state == 'cancelled' then return state end
local here = seen == 'processing' and type(redis.pcall('LPOS', KEYS[14], frame)) == 'number'
if not here and not state then return seen == '' and 'unknown' or 'moved' end
redis.pcall('ZADD', T.cancel, at_ms, id)
return 'stopping'
