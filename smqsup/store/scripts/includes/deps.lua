-- Dependencies, the parent's side and the end of a child (store/ops/workflows.py
-- has the whole protocol). Each queue's ``deps`` ZSET holds, all with score
-- 0 so that lexicographic ranges find them (fields split by a tab):
--
--   c PID CQ CID          child CID of queue partition CQ waits for message
--                         PID of this queue (depend.lua adds it)
--   o CQ CID PID OUT DATA the outbox: PID of this queue ended, OUT "done"
--                         (DATA: its result, JSON text) or "dead" (DATA: its
--                         dead-letter metadata); whoever drains it (the
--                         consumer that acked PID, the queue's collector)
--                         hands it to CID's unblock.lua, then removes it
--   w CID PQ PID          (the child's side) CID of this queue waits for PID
--                         of queue partition PQ (hold.lua, unblock.lua)
--   p CID PQ PID OUT DATA (the child's side) the outcome of that parent,
--                         what message.parents reads; goes when CID ends
--   h CID MS              CID was held at MS (ms, Redis clock) and its
--                         parents are not all told yet; the collector
--                         finishes that after a crash (unblock.lua removes it)
--   k LEN:KEY ID          dedup key KEY (its full name, LEN bytes) is held by
--                         message ID until it ends or starts
--   u ID MODE K           message ID holds "k" entry K until it ends (MODE
--                         "done") or starts ("start")
--   b ID HOME BID         message ID is a member of batch BID (its keys on
--                         queue HOME's slot: store/ops/batches.py)
--   B HOME BID ID OUT DATA  the batch outbox: member ID ended, OUT "done" or
--                         "dead" (DATA: its dead-letter metadata); the
--                         drainer hands it to batch_settle.lua on HOME's slot
--   S Q ID PAYLOAD        (on a batch's home) its on_success callback, to be
--                         published on queue Q (another slot) as ID
--
-- deps_ended(T, id, state, data, tracked, linked): the message ``id`` of
-- this queue ended in ``state`` (done, dead, cancelled) with ``data``
-- (result or metadata JSON). A ``linked`` one's parents' outcomes go, its
-- dedup key held to its end is freed, and its batch hears of its end (a "B"
-- entry); its waiting children (a ``tracked`` one only: only those can be
-- parents) turn into outbox entries; all in the same step as its end.
-- DEPS.told counts the children's entries (ack.lua and nack.lua say so, and
-- their consumer drains at once), DEPS.ended the batches' (their consumer
-- drains those in bulk: store/ops/batches.py).
--
-- deps_started(T, id, linked): linked message ``id`` started: a dedup key
-- it held until its start is freed.
-- Writes use redis.pcall: garbage in the deps key costs the dependencies of
-- this queue, never the move of a message.
local DEPS = {told = 0, ended = 0}
local DEPS_CHUNK = 1000

-- Whether link field ``linked`` has ``part`` (LINK_PARENTS, LINK_HOLD or LINK_BATCH).
local function links_have(linked, part)
  return math.floor(linked / part) % 2 == 1
end

-- The entries of ``kind`` for message ``id`` (a table, maybe empty).
local function deps_of(deps, kind, id)
  local found = redis.pcall('ZRANGEBYLEX', deps, '[' .. kind .. '\t' .. id .. '\t', '(' .. kind .. '\t' .. id .. '\n')
  return type(found) == 'table' and found or {}
end

-- Free the dedup keys message ``id`` holds until a moment in ``modes``.
local function deps_unhold(deps, id, modes)
  for _, u in ipairs(deps_of(deps, 'u', id)) do
    local mode, k = string.match(u, '^u\t[^\t]+\t(%l+)\t(.*)$')
    if modes[mode] then redis.pcall('ZREM', deps, k, u) end
  end
end

local function deps_started(T, id, linked)
  if T.deps and links_have(linked, LINK_HOLD) then deps_unhold(T.deps, id, {start = true}) end
end

-- The ends of linked message ``id``: its parents' outcomes, its holds, its
-- batch (as much as its link field ``linked`` says it has).
local function deps_unlink(deps, id, state, data, linked)
  if links_have(linked, LINK_PARENTS) then
    redis.pcall('ZREMRANGEBYLEX', deps, '[p\t' .. id .. '\t', '(p\t' .. id .. '\n')
  end
  if links_have(linked, LINK_HOLD) then deps_unhold(deps, id, {start = true, done = true}) end
  if not links_have(linked, LINK_BATCH) then return end
  for _, b in ipairs(deps_of(deps, 'b', id)) do
    local batch = string.sub(b, #id + 4)
    redis.pcall('ZREM', deps, b)
    redis.pcall('ZADD', deps, 0, 'B\t' .. batch .. '\t' .. id .. '\t' .. (state == 'done' and 'done\tnull' or
                'dead\t' .. (data or '{}')))
    DEPS.ended = DEPS.ended + 1
  end
end

local function deps_ended(T, id, state, data, tracked, linked)
  local deps = T.deps
  if not deps then return end
  if linked > 0 then deps_unlink(deps, id, state, data, linked) end
  if not tracked then return end
  local lo, hi = '[c\t' .. id .. '\t', '(c\t' .. id .. '\n'
  local kids = redis.pcall('ZRANGEBYLEX', deps, lo, hi)
  if type(kids) ~= 'table' or #kids == 0 then return end
  redis.pcall('ZREMRANGEBYLEX', deps, lo, hi)
  local tail = '\t' .. id .. '\t' .. (state == 'done' and 'done' or 'dead') .. '\t' .. (data or 'null')
  local entries = {}
  for i, kid in ipairs(kids) do
    entries[#entries + 1] = 0
    entries[#entries + 1] = 'o\t' .. string.sub(kid, #id + 4) .. tail
    if #entries >= 2 * DEPS_CHUNK or i == #kids then
      redis.pcall('ZADD', deps, unpack(entries))
      entries = {}
    end
  end
  DEPS.told = DEPS.told + #kids
end
