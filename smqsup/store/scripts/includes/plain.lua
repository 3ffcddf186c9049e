-- plain(frame): true when the head is attempts alone ("A|": priority 0, no
-- expiry), read byte by byte without copying: the hot path's question.
local function plain(frame)
  for i = 1, 10 do
    local b = string.byte(frame, i)
    if b == 124 then return i > 1 end  -- '|'
    if not b or b < 48 or b > 57 then return false end
  end
  return false
end

-- The head of a grouped frame with no option but its group and perhaps a
-- priority ("A:P:0:0:0:0:G|", framing.py), as a pattern for string.find:
-- nothing to screen or record when it starts or ends (includes/group_turn.lua).
local GROUP_ONLY_HEAD = '^%d+:%d:0:0:0:0:%d+|'
