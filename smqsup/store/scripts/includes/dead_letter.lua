--- @include "track"
-- dead_letter(dead, meta, at_ms, frame, T): LPUSH the dead-letter entry
-- "<meta with at_ms first>\n<frame>" on the list ``dead``; a tracked
-- message's record says "dead" (or "cancelled", for that reason) with the
-- metadata, and its event (includes/track.lua; T nil: none) is the reason
-- when that is "expired", "cancelled" or "removed", else "dead"; either
-- way its data is the metadata.
--
-- meta  a JSON object text with at least "reason" and no raw newline
--       (scripts.meta_json), so the first '\n' of an entry ends its metadata
-- at_ms when it was dead-lettered, ms, Redis clock
--
-- end_if_cancelled(dead, counters, at_ms, frame, T): if the cancel of
-- ``frame``'s message was asked (T.cancel, includes/track.lua: the mark
-- goes), dead-letter it "cancelled", counted in ``counters`` ("cancelled",
-- "dead_lettered"; nil: the caller counts), and return true; else false,
-- nothing done. Every script that moves a message out of a consumer's list
-- asks it first. ``dead`` holding another type than a list (a script that
-- checks no type: ack.lua, take.lua) answers false, the mark gone: garbage
-- there costs the cancel, never the message.
local DEAD_EVENTS = {expired = true, cancelled = true, removed = true}
local function dead_letter(dead, meta, at_ms, frame, T)
  local stamped = '{"at_ms":' .. string.format('%d', at_ms) .. ',' .. string.sub(meta, 2)
  redis.call('LPUSH', dead, stamped .. '\n' .. frame)
  if T then
    local reason = string.match(meta, '^{"reason":"(%l+)"[,}]')
    local event = DEAD_EVENTS[reason] and reason or 'dead'
    track(T, frame, reason == 'cancelled' and 'cancelled' or 'dead', event, at_ms, stamped)
  end
end

local function end_if_cancelled(dead, counters, at_ms, frame, T)
  if not cancel_asked(T, frame) then return false end
  local kind = redis.call('TYPE', dead)['ok']
  if kind ~= 'list' and kind ~= 'none' then return false end
  dead_letter(dead, '{"reason":"cancelled"}', at_ms, frame, T)
  if counters then
    redis.pcall('HINCRBY', counters, 'cancelled', 1)
    redis.pcall('HINCRBY', counters, 'dead_lettered', 1)
  end
  return true
end
