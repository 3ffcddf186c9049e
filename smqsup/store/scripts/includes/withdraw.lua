--- @include "groups"
-- withdraw(where, seen, frame): take a waiting frame out of where an
-- operator's look saw it (remove.lua, cancel.lua).
--
-- where  the queue's waiting places: {pending = its pending list, priority,
--        scheduled, delayed = its sorted sets}
-- seen   a key of ``where``, or "group" (``frame`` is then its member of
--        the groups' ready set: groups_use_ready); anything else: nowhere
-- frame  the exact bytes seen there
--
-- Returns how many were taken out (0: not there any more, or seen nowhere;
-- else 1) and the frame (a group's member gives its frame).
local function withdraw(where, seen, frame)
  local key = where[seen]
  if seen == 'group' then
    local taken = group_unready(frame)
    if taken then return 1, taken end
  elseif key == where.pending then
    return redis.call('LREM', key, 1, frame), frame
  elseif key then
    return redis.call('ZREM', key, frame), frame
  end
  return 0, frame
end
