-- frame_id(frame): the id at the start of a frame's payload (every producer
-- writes it first: message.py), or nil; the payload is not decoded.
local function frame_id(frame)
  return string.match(frame, '^[^|]+|{"id":"([A-Za-z0-9_.:-]+)"')
end
