--- @include "plain"
local LINK_PARENTS, LINK_HOLD, LINK_BATCH = 1, 2, 4
-- defaults.GROUP_NAME_MAX_BYTES: the longest group name (bytes)
local GROUP_NAME_MAX = 256
-- head_of(frame): what the head of a frame says (framing.py has the
-- grammar: "A", "A:P:E", "A:P:E:R", "A:P:E:R:V", "A:P:E:R:V:L" or
-- "A:P:E:R:V:L:G" (L may be 0 there), then
-- '|'): attempts, priority, expires_ms (0: never), the position where the
-- attempts digits end, R, the seconds its outcome is kept once it ends (0:
-- not tracked), V, the length its queue's event stream is capped at (0: no
-- events, includes/track.lua), and L, what the message has in its queue's
-- deps set to see to when it starts or ends (includes/deps.lua), the sum of
-- LINK_PARENTS (1: a dependency's child, its parents' outcomes),
-- LINK_HOLD (2: a dedup key held until its end or start) and LINK_BATCH (4:
-- a batch's member), else 0, and G, the length of its group's name (nil:
-- no group; includes/groups.lua), which ends the frame; nil when the bytes
-- are not a frame.
--
-- head_for(priority, expires_ms, kept_s, events_max, linked): the head of a
-- frame with no attempts yet, and its '|': "0" when it has no option, else
-- "0:P:E", "0:P:E:R" when tracked (kept_s > 0), "0:P:E:R:V" when its
-- lifecycle goes to the event stream (events_max > 0), "0:P:E:R:V:L" when
-- linked (linked L > 0; nil: 0), "0:P:E:R:V:L:G" when grouped (group_len G,
-- the length of the group's name, which the caller appends to the payload).
--
-- attempts_of(frame): attempts and that position (nil when not a frame).
--
-- add_attempt(frame, attempts, sep): one more attempt, as (count, frame).
-- The count stops at 999999999 (nine digits), so a forged prefix cannot turn
-- a frame into a malformed one. The rest of the head and the payload bytes
-- are copied, never decoded or re-encoded.
local function parse_head(frame)
  local bar = string.find(frame, '|', 1, true)
  if not bar or bar > 51 then return nil end
  local head = string.sub(frame, 1, bar - 1)
  local a = string.match(head, '^%d+$')
  if a then
    if #a > 9 then return nil end
    return tonumber(a), 0, 0, bar, 0, 0, 0
  end
  -- The grammar by its number of fields: one pattern to try.
  local _, colons = string.gsub(head, ':', '')
  local a2, p, e
  local r, v, l, g = '0', '0', '0', nil
  if colons == 2 then
    a2, p, e = string.match(head, '^(%d+):(%d):(%d+)$')
  elseif colons == 3 then
    a2, p, e, r = string.match(head, '^(%d+):(%d):(%d+):([1-9]%d*)$')
  elseif colons == 4 then
    a2, p, e, r, v = string.match(head, '^(%d+):(%d):(%d+):(%d+):([1-9]%d*)$')
  elseif colons == 5 then
    a2, p, e, r, v, l = string.match(head, '^(%d+):(%d):(%d+):(%d+):(%d+):([1-7])$')
  elseif colons == 6 then
    a2, p, e, r, v, l, g = string.match(head, '^(%d+):(%d):(%d+):(%d+):(%d+):([0-7]):([1-9]%d?%d?)$')
    g = tonumber(g)
    if g and (g > GROUP_NAME_MAX or g > #frame - bar) then return nil end
  end
  if not a2 or #a2 > 9 or #e > 15 or #r > 8 or #v > 7 then return nil end
  return tonumber(a2), tonumber(p), tonumber(e), #a2 + 1, tonumber(r), tonumber(v), tonumber(l), g
end

-- A run of a script reads the head of one frame several times (its
-- tracking, its links, its group): the answers are kept for the run.
local HEADS = {}
local function head_of(frame)
  local known = HEADS[frame]
  if not known then
    known = {parse_head(frame)}
    HEADS[frame] = known
  end
  return unpack(known, 1, 8)
end

local function head_for(priority, expires_ms, kept_s, events_max, linked, group_len)
  if group_len then
    return string.format('0:%d:%d:%d:%d:%d:%d|', priority, expires_ms, kept_s, events_max, linked or 0, group_len)
  elseif linked and linked > 0 then
    return string.format('0:%d:%d:%d:%d:%d|', priority, expires_ms, kept_s, events_max, linked)
  elseif events_max > 0 then
    return string.format('0:%d:%d:%d:%d|', priority, expires_ms, kept_s, events_max)
  elseif kept_s > 0 then
    return string.format('0:%d:%d:%d|', priority, expires_ms, kept_s)
  elseif priority > 0 or expires_ms > 0 then
    return string.format('0:%d:%d|', priority, expires_ms)
  end
  return '0|'
end

local function attempts_of(frame)
  local attempts, _, _, sep = head_of(frame)
  return attempts, sep
end

local function add_attempt(frame, attempts, sep)
  local n = math.min(attempts + 1, 999999999)
  return n, string.format('%d', n) .. string.sub(frame, sep)
end
