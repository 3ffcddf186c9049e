-- Tell a held message (hold.lua) the outcomes of some of its parents, and
-- release it once none is left to wait for (store/ops/workflows.py). Each
-- outcome counts once (its "w" entry goes with it), so whoever repeats a
-- call (a drain that died before it removed its outbox entry, the
-- collector's repair of a hold) changes nothing.
--
-- KEYS[1]  blocked hash of the queue (ID -> "D:T:F|frame")
-- KEYS[2]  deps set of the queue (includes/deps.lua)
-- KEYS[3]  pending list, KEYS[4] priority set, KEYS[5] its sequence counter
-- KEYS[6]  scheduled set of the queue (a child with a delay goes there)
-- KEYS[7]  dead-letter list of the queue, KEYS[8] its counters hash
-- KEYS[9]  tracking hash of the queue, KEYS[10] its expiry set, KEYS[11] its
--          event stream (includes/track.lua)
-- KEYS[12..17] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua)
-- KEYS[18] its cancel set: a held message whose cancel was asked ends
--          "cancelled" here, whether its parents released it or failed it
-- KEYS[19] its ready times (includes/ready_at.lua): a child ready at its
--          release counts its lag from then, not from its publish
-- ARGV[1]  the held message's id
-- ARGV[2]  its "h" mark to remove (its parents are all told), or "": none
-- ARGV[3..] four per parent: its queue partition, its id, "done" and its
--          result (JSON text), or "dead" and the metadata this message is
--          dead-lettered with for it (JSON text: "reason" "dependency
--          failed: ...") unless it runs anyway (its F flag)
--
-- Returns {status, told}: status "released" (ready now, or scheduled after
-- its delay), "dead" (a parent failed: dead-lettered), "waiting" (parents
-- are left), "gone" (not held: released or dead already); told, the
-- children of its own that its dead-lettering put in KEYS[2]'s outbox.
-- A key of the wrong type is an error reply before anything is written.
local blocked, deps, pending, prio_set, prio_seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local scheduled, dead, counters = KEYS[6], KEYS[7], KEYS[8]
local T = {hash = KEYS[9], expiry = KEYS[10], events = KEYS[11], deps = deps, cancel = KEYS[18]}
local id = ARGV[1]
--- @include "wrong_type"
--- @include "now_ms"
--- @include "ready"
--- @include "dead_letter"
--- @include "ready_at"
groups_use(12, pending, prio_seq)

local refused = wrong_type({{blocked, 'hash'}, {deps, 'zset'}, {pending, 'list'}, {prio_set, 'zset'},
                            {scheduled, 'zset'}, {dead, 'list'}})
if refused then return refused end
if ARGV[2] ~= '' then redis.call('ZREM', deps, ARGV[2]) end
local waits_lo, waits_hi = '[w\t' .. id .. '\t', '(w\t' .. id .. '\n'
-- Forget the hold: the kept frame and its waits.
local function drop()
  redis.call('HDEL', blocked, id)
  redis.call('ZREMRANGEBYLEX', deps, waits_lo, waits_hi)
end
local kept = redis.call('HGET', blocked, id)
local d, t, f, at = string.match(kept or '', '^(%d+):(%d+):([01])|()')
local frame = d and string.sub(kept, at)
if not frame or not string.find(frame, '|', 1, true) then  -- (not held, or garbage: nothing to release)
  drop()
  return {'gone', 0}
end
local failed = nil
for i = 3, #ARGV - 3, 4 do
  local pair = id .. '\t' .. ARGV[i] .. '\t' .. ARGV[i + 1]
  if redis.call('ZREM', deps, 'w\t' .. pair) == 1 then
    redis.call('ZADD', deps, 0, 'p\t' .. pair .. '\t' .. ARGV[i + 2] .. '\t' .. ARGV[i + 3])
    if ARGV[i + 2] ~= 'done' and f == '0' and not failed then failed = ARGV[i + 3] end
  end
end
local at_ms = now_ms()
if failed then
  drop()
  if not end_if_cancelled(dead, counters, at_ms, frame, T) then
    dead_letter(dead, failed, at_ms, frame, T)
    redis.pcall('HINCRBY', counters, 'dead_lettered', 1)
  end
  return {'dead', DEPS.told + DEPS.ended}
end
if redis.call('ZLEXCOUNT', deps, waits_lo, waits_hi) > 0 then return {'waiting', 0} end
redis.call('HDEL', blocked, id)
if end_if_cancelled(dead, counters, at_ms, frame, T) then return {'dead', DEPS.told + DEPS.ended} end
-- Every option it was published with but its delay and ttl, which count
-- from now: its priority, tracking, events, and its group (whose name ends
-- the kept frame: make_ready puts it in its group).
local _, priority, _, _, kept_s, events_max, _, group_len = head_of(frame)
local ttl_ms = tonumber(t)
frame = head_for(priority or 0, ttl_ms > 0 and at_ms + ttl_ms or 0, kept_s or 0, events_max or 0, 1, group_len)
  .. string.sub(frame, string.find(frame, '|', 1, true) + 1)
if tonumber(d) > 0 then
  redis.call('ZADD', scheduled, now_ms_up() + tonumber(d), frame)
  track(T, frame, 'scheduled', 'released', at_ms)
else
  make_ready(pending, prio_set, prio_seq, frame)
  ready_at_mark(KEYS[19], {frame}, at_ms, at_ms)
  track(T, frame, 'waiting', 'released', at_ms)
end
return {'released', 0}
