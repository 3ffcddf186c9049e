-- Dependencies, the parent's side and the end of a child (store/workflows.py
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
--
-- deps_ended(T, id, state, data, tracked, linked): the message ``id`` of
-- this queue ended in ``state`` (done, dead, cancelled) with ``data``
-- (result or metadata JSON). Its own parents' outcomes go (``linked``); its
-- waiting children (a ``tracked`` one only: only those can be parents) turn
-- into outbox entries, in the same step as its end, and DEPS.told counts
-- them (ack.lua and nack.lua say so, and their consumer drains at once).
-- Writes use redis.pcall: garbage in the deps key costs the dependencies of
-- this queue, never the move of a message.
local DEPS = {told = 0}
local DEPS_CHUNK = 1000

local function deps_ended(T, id, state, data, tracked, linked)
  local deps = T.deps
  if not deps then return end
  if linked > 0 then redis.pcall('ZREMRANGEBYLEX', deps, '[p\t' .. id .. '\t', '(p\t' .. id .. '\n') end
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
