-- record_state(raw): the state a tracked message's record says (HGET of
-- T.hash ID, includes/track.lua), or nil when there is none or it is not
-- one track.lua wrote (not a string, not JSON, no known state): garbage
-- is believed never, as the producers read it (store/core/records.py).
local RECORD_STATES = {blocked = true, scheduled = true, waiting = true, active = true, retrying = true,
                       done = true, dead = true, cancelled = true}
local function record_state(raw)
  if type(raw) ~= 'string' then return nil end
  local ok, decoded = pcall(cjson.decode, raw)
  if not ok or type(decoded) ~= 'table' then return nil end
  local state = decoded.state
  return RECORD_STATES[state] and state or nil
end
