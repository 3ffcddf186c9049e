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
-- KEYS[9]  its deps set (includes/deps.lua): the holders of dedup keys held
--          until their message starts or ends ("k" and "u" entries), batch
--          memberships ("b")
-- KEYS[10..15] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua)
-- KEYS[16..]  the dedup keys of the messages that have one (ns:{Q}:dedup:KEY)
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
-- ARGV[9]  "" (a dedup key holds for the dedup ttl), "done" or "start": it
--          holds until the message ends, or starts (then the dedup ttl
--          plays no part); the head is linked
-- ARGV[10] "" or "HOME\tBID": each message queued is a member of batch BID,
--          whose keys are on queue HOME's slot; the head is linked
-- ARGV[11] "" or the group of every message (1 to 256 bytes): each frame
--          ends with it, its head says its length, and it is made ready in
--          its group (includes/groups.lua)
-- ARGV[12..]  three per message, oldest first: its id, the index in KEYS of
--          its dedup key (0: none), its payload
--
-- Returns {id1, queued1, id2, queued2, ...}: per message, 1 and its own id
-- when queued; 0 and the id of the message holding its dedup key when that
-- key was taken (published less than the dedup ttl ago, or its message held
-- it until it ends or starts and has not; nothing queued).
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
local deps, hold_to, link = KEYS[9], ARGV[9], ARGV[10]
local T = (kept_s > 0 or events_max > 0) and {hash = KEYS[6], expiry = KEYS[7], events = KEYS[8]} or nil
--- @include "wrong_type"
--- @include "now_ms"
--- @include "ready"
--- @include "track"

local expected = {{pending, 'list'}, {prio_set, 'zset'}, {scheduled, 'zset'}}
if #KEYS > 15 or link ~= '' then expected[#expected + 1] = {deps, 'zset'} end
for i = 16, #KEYS do expected[#expected + 1] = {KEYS[i], 'string'} end
local group = ARGV[11]
if group ~= '' then
  groups_use(10, pending, prio_seq)
  expected[#expected + 1] = {KEYS[10], 'zset'}
end
local refused = wrong_type(expected)
if refused then return refused end

local at_ms = now_ms()
-- A due time rounds up, so that no message is handed out before now + delay
-- (the collector promotes when the clock, in whole ms, reaches it).
local due = -1
if delay_ms >= 0 then due = now_ms_up() + delay_ms elseif due_at_ms >= 0 then due = due_at_ms end
local expires = 0
if ttl_ms > 0 then expires = at_ms + ttl_ms end
local head = head_for(priority, expires, kept_s, events_max,
                      (hold_to ~= '' and LINK_HOLD or 0) + (link ~= '' and LINK_BATCH or 0),
                      group ~= '' and #group or nil)

-- Who holds dedup key ``key`` (its full name) for message ``id``, or nil
-- once this call took it: the holder of an end or start hold ("k" entry:
-- "k\tLEN:KEY\tID"), else of the string key (dedup ttl). A hold to the end
-- or the start takes a "k" entry and a "u" entry naming it ("u\tID\tMODE\t"
-- and the "k" entry: includes/deps.lua releases it).
local function holder_of(key, id)
  local k = 'k\t' .. #key .. ':' .. key .. '\t'
  local held = redis.call('ZRANGEBYLEX', deps, '[' .. k, '(' .. string.sub(k, 1, -2) .. '\n', 'LIMIT', 0, 1)
  if #held > 0 then return string.sub(held[1], #k + 1) end
  if hold_to == '' then
    if redis.call('SET', key, id, 'NX', 'PX', dedup_ttl_ms) then return nil end
    return redis.call('GET', key)
  end
  local ttl_holder = redis.call('GET', key)
  if ttl_holder then return ttl_holder end
  redis.call('ZADD', deps, 0, k .. id, 0, 'u\t' .. id .. '\t' .. hold_to .. '\t' .. k .. id)
  return nil
end

local out, queued, deduplicated, ready = {}, 0, 0, {}
for i = 12, #ARGV - 2, 3 do
  local id, dk, payload = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local holder = nil
  if dk > 0 then holder = holder_of(KEYS[dk], id) end
  if holder then
    out[#out + 1] = holder
    out[#out + 1] = 0
    deduplicated = deduplicated + 1
  else
    local frame = head .. payload .. group
    if due > at_ms then
      redis.call('ZADD', scheduled, due, frame)
      track(T, frame, 'scheduled', 'published', at_ms)
    else
      ready[#ready + 1] = frame
      track(T, frame, 'waiting', 'published', at_ms)
    end
    if link ~= '' then redis.call('ZADD', deps, 0, 'b\t' .. id .. '\t' .. link) end
    out[#out + 1] = id
    out[#out + 1] = 1
    queued = queued + 1
  end
end
make_ready_all(pending, prio_set, prio_seq, ready)
if count and queued > 0 then redis.pcall('HINCRBY', counters, 'published', queued) end
if deduplicated > 0 then redis.pcall('HINCRBY', counters, 'deduplicated', deduplicated) end
return out
