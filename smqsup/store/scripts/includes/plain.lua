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
