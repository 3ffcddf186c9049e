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
