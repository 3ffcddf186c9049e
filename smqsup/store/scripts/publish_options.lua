-- Publish messages with options: a delay or a due time, a priority, a ttl,
-- dedup keys, tracking. (Plain messages go through publish.lua, the fast path.)
--
-- KEYS[1]  pending list of the queue
-- KEYS[2]  counters hash of the queue ("published", "deduplicated")
-- KEYS[3]  priority set of the queue
-- KEYS[4]  priority sequence counter of the queue
-- KEYS[5]  scheduled set of the queue (score: due time, ms, Redis clock)
-- KEYS[6]  tracking hash of the queue, KEYS[7] its expiry set (includes/track.lua)
-- KEYS[8]  its event stream (includes/track.lua: "published")
-- KEYS[9..]  the dedup keys of the messages that have one (ns:{Q}:dedup:KEY)
-- ARGV[1]  "1": count in KEYS[2] (statistics on)
-- ARGV[2]  priority, 0-9
-- ARGV[3]  delay in ms from now (integer >= 0), or -1: none
-- ARGV[4]  due time in ms since the epoch (Redis clock), or -1: none; a
--          due time not after now means at once
-- ARGV[5]  ttl in ms (integer > 0), or 0: none. A message not taken by a
--          consumer within ttl of now is dead-lettered as "expired"
-- ARGV[6]  dedup ttl in ms (integer > 0)
-- ARGV[7]  result_ttl in seconds (0: not tracked; else 1 to 99999999): the
--          head says it and each message queued is tracked, "waiting" or
--          "scheduled" (a message deduplicated is not: its holder is)
-- ARGV[8]  events_max (0: no events; else 1 to 1000000): the head says it,
--          and each message queued adds "published" to KEYS[8], which
--          is capped at about that many entries
-- ARGV[9..]  three per message, oldest first: its id, the index in KEYS of
--          its dedup key (0: none), its payload
--
-- Returns {id1, queued1, id2, queued2, ...}: per message, 1 and its own id
-- when queued; 0 and the id of the message holding its dedup key when that
-- key was taken (published less than the dedup ttl ago; nothing queued).
-- Check and set of a dedup key are one step here, so of any number of
-- publishers racing on a key exactly one queues a message.
-- A key of the wrong type among KEYS (a dedup key that is not a string)
-- is an error reply "WRONGTYPE ..." before anything is written.
local pending, counters, prio_set, prio_seq, scheduled = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local count, priority = ARGV[1] == '1', tonumber(ARGV[2])
local delay_ms, due_at_ms, ttl_ms, dedup_ttl_ms = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
                                                  tonumber(ARGV[6])
local kept_s = tonumber(ARGV[7])
local events_max = tonumber(ARGV[8])
local T = (kept_s > 0 or events_max > 0) and {hash = KEYS[6], expiry = KEYS[7], events = KEYS[8]} or nil
--- @include "wrong_type"
--- @include "now_ms"
--- @include "ready"
--- @include "track"

local expected = {{pending, 'list'}, {prio_set, 'zset'}, {scheduled, 'zset'}}
for i = 9, #KEYS do expected[#expected + 1] = {KEYS[i], 'string'} end
local refused = wrong_type(expected)
if refused then return refused end

local at_ms = now_ms()
-- A due time rounds up, so that no message is handed out before now + delay
-- (the collector promotes when the clock, in whole ms, reaches it).
local due = -1
if delay_ms >= 0 then due = now_ms_up() + delay_ms elseif due_at_ms >= 0 then due = due_at_ms end
local expires = 0
if ttl_ms > 0 then expires = at_ms + ttl_ms end
local head = head_for(priority, expires, kept_s, events_max)

local out, queued, deduplicated, ready = {}, 0, 0, {}
for i = 9, #ARGV - 2, 3 do
  local id, dk, payload = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local holder = nil
  if dk > 0 and not redis.call('SET', KEYS[dk], id, 'NX', 'PX', dedup_ttl_ms) then
    holder = redis.call('GET', KEYS[dk])
  end
  if holder then
    out[#out + 1] = holder
    out[#out + 1] = 0
    deduplicated = deduplicated + 1
  else
    local frame = head .. payload
    if due > at_ms then
      redis.call('ZADD', scheduled, due, frame)
      track(T, frame, 'scheduled', 'published', at_ms)
    else
      ready[#ready + 1] = frame
      track(T, frame, 'waiting', 'published', at_ms)
    end
    out[#out + 1] = id
    out[#out + 1] = 1
    queued = queued + 1
  end
end
make_ready_all(pending, prio_set, prio_seq, ready)
if count and queued > 0 then redis.pcall('HINCRBY', counters, 'published', queued) end
if deduplicated > 0 then redis.pcall('HINCRBY', counters, 'deduplicated', deduplicated) end
return out
