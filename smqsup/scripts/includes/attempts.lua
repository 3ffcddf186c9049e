-- attempts_of(frame): the attempt count of a frame "<attempts>|payload" and
-- the position of its '|'; nil when the bytes are not a frame. The prefix is
-- 1 to 9 decimal digits, as message.split_frame() requires.
--
-- add_attempt(frame, attempts, sep): one more attempt, as (count, frame).
-- The count stops at 999999999 (nine digits), so a forged prefix cannot turn
-- a frame into a malformed one. The payload bytes after '|' are copied, never
-- decoded or re-encoded.
local function attempts_of(frame)
  local sep = string.find(frame, '|', 1, true)
  local head = sep and string.sub(frame, 1, sep - 1)
  if head and #head <= 9 and string.match(head, '^%d+$') then
    return tonumber(head), sep
  end
  return nil
end

local function add_attempt(frame, attempts, sep)
  local n = math.min(attempts + 1, 999999999)
  return n, string.format('%d', n) .. string.sub(frame, sep)
end
