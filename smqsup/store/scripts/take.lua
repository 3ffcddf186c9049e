-- Ack the frames a consumer finished, then take the next ready frames for
-- it, without blocking: after a blocking fetch timed out, at start, after a
-- reconnect, while the queue is paused, and to fill a consumer up to its
-- concurrency and prefetch; the acks of a batch ride along, so settling
-- many messages and taking their successors is one call. The consumer
-- blocks (BLMOVE on KEYS[2]) only after this found nothing
-- (includes/ready.lua says why that is safe).
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
-- KEYS[10] tracking hash of the queue, KEYS[11] its expiry set, KEYS[12] its
--          event stream
--          (includes/track.lua: a tracked frame taken is "active")
-- KEYS[13] its dependencies (includes/deps.lua: an end tells the children)
-- KEYS[14..19] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua: a ticket taken is redeemed for its group's
--          frame; a grouped frame acked frees its group's slot)
-- KEYS[20] its cancel set (includes/track.lua): an acked frame whose
--          cancel was asked is dead-lettered "cancelled" (KEYS[7], counted
--          "cancelled", not "acked"), never "done"; the hot path reads it
--          in the EXISTS it makes anyway (no cost while none is pending)
-- ARGV[1]  the consumer's id
-- ARGV[2]  most frames to take, 0 to 1000 (0: only ack, and say whether
--          the consumer is registered and the queue paused); it takes at
--          most its share of the ready frames: ceil(ready / consumers in KEYS[4])
-- ARGV[3]  the queue's rate limit: µs between handler starts across the
--          whole queue, "0" for none
-- ARGV[4]  its burst (>= 1)
-- ARGV[5]  partitions the consumer works (rate_of's ``known``)
-- ARGV[6..8] the queue's group_concurrency (0: none), µs between one
--          group's starts (0: no group rate) and its burst (groups_use)
-- ARGV[9]  "1": count the acks in KEYS[3] "acked" (statistics on); "0": not
-- ARGV[10..] frames to ack first, the exact bytes the consumer fetched (none:
--          a take alone), each removed as ack.lua removes one
--
-- Returns {registered, paused, wait, late, told, ended, frame, start...}:
-- registered and paused as ack.lua says; told and ended as ack.lua says, of
-- the acked frames (one not plain ends there: its record, events, links)
-- and of those dead-lettered; wait: with a rate limit that allowed no start
-- now, µs before looking again (else 0); then each frame taken, in the
-- order they must be handled, with the µs its consumer must wait before
-- starting it (0 without a rate limit): none when the queue had none, is
-- paused, or the consumer is not registered. late: the positions (1 for
-- ARGV[10]) of the acked frames that were not in KEYS[1] (late acks: counted
-- in KEYS[3] "late_acks", nothing else touched).
-- A key of the wrong type among KEYS[1, 2, 4, 5] is an error reply
-- "WRONGTYPE ..." before anything is written (the hot path's first reads
-- fail by themselves; elsewhere includes/wrong_type.lua checks). A
-- dead-letter list of the wrong type matters only to an expired frame: the
-- script then fails with that frame still in KEYS[1] (the consumer's
-- recovery finds it there), so consumption of the others goes on meanwhile.
local q = {processing = KEYS[1], pending = KEYS[2], counters = KEYS[3], consumers = KEYS[4],
           priority = KEYS[5], paused = KEYS[6], dead = KEYS[7]}
q.track = {hash = KEYS[10], expiry = KEYS[11], events = KEYS[12], deps = KEYS[13], cancel = KEYS[20]}
local consumer_id = ARGV[1]
local most = math.max(0, math.min(tonumber(ARGV[2]) or 1, 1000))
local asked = most  -- (``most`` becomes its share of what is ready)
--- @include "plain"
-- With no group limits (ARGV[6], ARGV[7]: nothing to count or book), a
-- group-only frame ends as a plain one does, and groups' turns the hot
-- path popped are redeemed right after it (includes/group_turn.lua).
local light = ARGV[6] == '0' and ARGV[7] == '0'

local FIRST_ACK = 10
-- The acks (ARGV[10..]), counted in KEYS[3]; returns the late positions.
-- Those acked that are not plain go to ``ended`` (their end is tracked
-- once the includes exist: after the hot path).
-- The frames a consumer finished are, when it started them in the order
-- it took them and they all ended, exactly the oldest of its list (its
-- right end, in ARGV order): one LRANGE proves it, one LTRIM removes them.
-- Otherwise each goes by LREM, from the right end.
local ended = {}
local acked_frames = nil  -- (off the hot path) every frame acked, for the cancels
local function ack_all()
  local count = #ARGV - FIRST_ACK + 1
  local late, acked = {}, 0
  if count > 1 then
    local tail = redis.call('LRANGE', q.processing, -count, -1)
    local same = #tail == count
    for j = 1, count do
      if not same then break end
      same = tail[count - j + 1] == ARGV[FIRST_ACK - 1 + j]
    end
    if same then
      redis.call('LTRIM', q.processing, 0, -count - 1)
      acked = count
      for i = FIRST_ACK, #ARGV do
        if acked_frames then acked_frames[#acked_frames + 1] = ARGV[i] end
        if not (plain(ARGV[i]) or light and string.find(ARGV[i], GROUP_ONLY_HEAD)) then ended[#ended + 1] = ARGV[i] end
      end
    end
  end
  if acked == 0 then
    for i = FIRST_ACK, #ARGV do
      if redis.call('LREM', q.processing, -1, ARGV[i]) == 0 then
        late[#late + 1] = i - FIRST_ACK + 1
      else
        acked = acked + 1
        if acked_frames then acked_frames[#acked_frames + 1] = ARGV[i] end
        if not (plain(ARGV[i]) or light and string.find(ARGV[i], GROUP_ONLY_HEAD)) then ended[#ended + 1] = ARGV[i] end
      end
    end
  end
  if acked > 0 and ARGV[9] == '1' then redis.pcall('HINCRBY', q.counters, 'acked', acked) end
  if #late > 0 then redis.pcall('HINCRBY', q.counters, 'late_acks', #late) end
  return late
end

-- The hot path: a registered consumer, no rate limit, neither a priority
-- set nor a paused flag (nor, when nothing is ready, a group waiting for
-- its rate: the path below gives it its ticket). No TYPE check is needed
-- for the contract above: its reads come before any write and fail by
-- themselves on a key of the wrong type (HEXISTS the registry, LLEN the
-- pending list, the acks' LRANGE or LREM, or LLEN, the consumer's list).
-- More frames move in one go (RPOP with a count, one LPUSH: the same order
-- as an LMOVE each). It returns before the includes below exist (their
-- functions are made only when a run reaches them), unless a frame it
-- moved has a head to screen, is a group's ticket on a queue with group
-- limits, or is one of the turns that fell short of the frames asked
-- (then they move below).
local hot_reply, hot_frames, hot_moved, hot_turned = nil, nil, true, 0
local hot = ARGV[3] == '0' and redis.call('HEXISTS', q.consumers, consumer_id) == 1
    and redis.call('EXISTS', q.paused, q.priority, q.track.cancel) == 0
local ready = hot and redis.call('LLEN', q.pending)
if hot and ready == 0 and most > 0 and redis.call('EXISTS', KEYS[18]) == 1 then hot = false end
if hot then
  if #ARGV < FIRST_ACK and most > 0 and ready > 0 then redis.call('LLEN', q.processing) end
  local reply = {1, 0, 0, ack_all(), 0, 0}
  if most == 0 or ready == 0 then
    if #ended == 0 then return reply end
    hot_reply, hot_frames = reply, {}
  end
  -- At most its share of what is ready (rounded up): a short queue is
  -- spread over the queue's consumers, none left idle while one holds the
  -- rest; a backlog goes in full batches.
  if not hot_frames and most > 1 and ready > 1 then
    most = math.min(most, math.ceil(ready / math.max(1, redis.call('HLEN', q.consumers))))
  end
  local frames = hot_frames or redis.call('RPOP', q.pending, math.min(most, ready))
  local all_plain = #ended == 0
  for _, frame in ipairs(frames) do
    if not plain(frame) then all_plain = false break end
  end
  if all_plain then
    if #frames > 0 then redis.call('LPUSH', q.processing, unpack(frames)) end
    for _, frame in ipairs(frames) do
      reply[#reply + 1] = frame
      reply[#reply + 1] = 0
    end
    return reply
  end
  hot_reply, hot_frames, hot_moved = reply, frames, false
end

--- @include "group_turn"
-- Popped by the hot path, not all plain: with no group limits and nothing
-- acked to end, the groups' turns among them are redeemed here, before the
-- includes below exist; handed out as they are when every frame is plain
-- or group-only and the turns filled the take (else they go below).
if hot_frames and not hot_moved and light and #ended == 0 then
  local G = {ready = KEYS[14], count = KEYS[15], state = KEYS[16], pending = q.pending}
  local frames, simple, turns = group_turn_lib().popped(G, hot_frames)
  if simple and (turns == 0 or #frames >= asked) then
    if #frames > 0 then redis.call('LPUSH', q.processing, unpack(frames)) end
    for _, frame in ipairs(frames) do
      hot_reply[#hot_reply + 1] = frame
      hot_reply[#hot_reply + 1] = 0
    end
    return hot_reply
  end
  hot_frames, hot_turned = frames, turns
end

--- @include "wrong_type"
--- @include "fetch_next"
groups_use(14, q.pending, nil, ARGV[6], ARGV[7], ARGV[8])

-- Frames popped from the pending list (not yet in KEYS[1]), tickets
-- redeemed for their groups' frames (includes/groups.lua), moved into
-- KEYS[1] in their order; the frames and the µs each waits (group rate).
local function move_popped(items)
  local frames, waits, turns = {}, {}, 0
  for _, item in ipairs(items) do
    if is_ticket(item) then
      turns = turns + 1
      local frame, wait, not_ticket = group_take(string.sub(item, 2))
      if not_ticket then frame, wait = item, 0 end
      if frame then
        frames[#frames + 1] = frame
        waits[#frames] = wait
      end
    else
      frames[#frames + 1] = item
    end
  end
  if #frames > 0 then redis.call('LPUSH', q.processing, unpack(frames)) end
  return frames, waits, turns
end

-- After move_popped met groups' turns: take on, turn by turn, up to the
-- share of what is ready counting the groups' ready frames (the pending
-- list holds one turn for all of a group's), so one group with a backlog
-- fills a take as a list of frames would.
local function take_more(frames, waits)
  local ready = redis.call('LLEN', q.pending) + (tonumber(redis.pcall('ZCARD', GROUPS.ready)) or 0) + #frames
  local share = math.min(asked, math.ceil(ready / math.max(1, redis.call('HLEN', q.consumers))))
  while #frames < share do
    local nxt = take_ready(redis.call, q.processing, q.pending, q.priority, false)
    if not nxt then break end
    frames[#frames + 1] = nxt
    waits[#frames] = GROUPS.last_wait
  end
  return frames, waits
end

-- Frames moved into KEYS[1], appended to ``reply`` in their order, except
-- those whose expiry passed: each is dead-lettered then, and leaves
-- (fetch_next's order: a dead-letter list of the wrong type fails the
-- script with the frame still ours).
local function screen_all(reply, frames, waits)
  local at_ms = nil
  for i, frame in ipairs(frames) do
    local expires = not plain(frame) and select(3, head_of(frame))
    if expires and expires ~= 0 then at_ms = at_ms or now_ms() end
    if expires and expires ~= 0 and expires <= at_ms then
      if not end_if_cancelled(q.dead, q.counters, at_ms, frame, q.track) then  -- (a cancel pending: "cancelled")
        dead_letter(q.dead, '{"reason":"expired"}', at_ms, frame, q.track)
        redis.pcall('HINCRBY', q.counters, 'expired', 1)
        redis.pcall('HINCRBY', q.counters, 'dead_lettered', 1)
      end
      redis.call('LREM', q.processing, 1, frame)
      group_settled(frame)
    else
      if q.track and expires then track(q.track, frame, 'active', 'started', at_ms) end
      reply[#reply + 1] = frame
      reply[#reply + 1] = waits and waits[i] or 0
    end
  end
  return reply
end
-- The acked frames whose cancel was asked (``acked``: nil when no cancel
-- is pending) dead-lettered "cancelled", not counted "acked"; returns
-- ``ended`` without them (the others end "done").
local function ended_or_cancelled(ended_frames, acked)
  if not acked then return ended_frames end
  local at_ms, gone = now_ms(), {}
  for _, frame in ipairs(acked) do
    if end_if_cancelled(q.dead, q.counters, at_ms, frame, q.track) then
      gone[frame] = true
      group_settled(frame)
      if ARGV[9] == '1' then redis.pcall('HINCRBY', q.counters, 'acked', -1) end
    end
  end
  local kept = {}
  for _, frame in ipairs(ended_frames) do
    if not gone[frame] then kept[#kept + 1] = frame end
  end
  return kept
end
-- The end of each acked frame that is not plain (its record, its event,
-- its links: includes/track.lua), then the counts of outbox entries in the
-- reply (``finished``).
for _, frame in ipairs(ended) do
  track(q.track, frame, 'done', 'done', nil, nil, 'null')
  group_settled(frame)
end
local function finished(reply)
  reply[5], reply[6] = DEPS.told, DEPS.ended
  return reply
end
if hot_frames then
  if hot_moved then return finished(screen_all(hot_reply, hot_frames)) end
  local frames, waits, turns = move_popped(hot_frames)
  turns = turns + hot_turned
  if turns > 0 and #frames < asked then frames, waits = take_more(frames, waits) end
  return finished(screen_all(hot_reply, frames, waits))
end

-- Every other case: the registration, the paused flag, a priority set or
-- a rate limit decide; the keys' types are checked first.
q.rate = rate_of(KEYS[8], KEYS[9], ARGV[3], ARGV[4], ARGV[5])
local refused = wrong_type({{q.processing, 'list'}, {q.pending, 'list'}, {q.consumers, 'hash'},
                           {q.priority, 'zset'}})
if refused then return refused end
acked_frames = #ARGV >= FIRST_ACK and redis.pcall('EXISTS', q.track.cancel) == 1 and {} or nil
local late = ack_all()
ended = ended_or_cancelled(ended, acked_frames)
for _, frame in ipairs(ended) do
  track(q.track, frame, 'done', 'done', nil, nil, 'null')
  group_settled(frame)
end
local registered, nxt, paused, wait = fetch_next(redis.call, q, consumer_id, most > 0)
local reply = {registered, paused, nxt and 0 or wait, late, 0, 0}
local prioritised = 0  -- frames in the priority set (read only where it decides something)
if nxt and most > 1 then
  prioritised = redis.call('ZCARD', q.priority)
  local ready = redis.call('LLEN', q.pending) + prioritised + 1
  most = math.min(most, math.ceil(ready / math.max(1, redis.call('HLEN', q.consumers))))
end
if nxt and most > 1 and not q.rate and prioritised == 0 then
  reply[7], reply[8] = nxt, wait
  local frames = redis.call('RPOP', q.pending, most - 1)
  if not frames then return finished(reply) end
  return finished(screen_all(reply, move_popped(frames)))
end
-- After the first, the registration and the paused flag cannot change
-- within this script: without a rate limit to book, each next frame costs
-- the take itself (and its expiry screen when it is not plain).
while nxt do
  reply[#reply + 1] = nxt
  reply[#reply + 1] = wait
  if (#reply - 6) / 2 >= most then break end
  if q.rate then
    registered, nxt, paused, wait = fetch_next(redis.call, q, consumer_id, true)
  else
    nxt = take_ready(redis.call, q.processing, q.pending, q.priority, true)
    if nxt and not plain(nxt) then
      registered, nxt, paused, wait = fetch_next(redis.call, q, consumer_id, true, nxt)
    end
  end
end
return finished(reply)
