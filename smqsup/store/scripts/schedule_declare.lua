-- Renew one supervisor's declarations of its schedules on one queue (every
-- heartbeat_interval), and say which definitions differ from its own.
--
-- KEYS[1]  definitions hash of the queue (ns:{Q}:schedules)
-- KEYS[2k], KEYS[2k+1]  state hash and declarers set of the k-th schedule
-- ARGV[1]  the supervisor's declarer id
-- ARGV[2]  how long each declaration holds without a renewal, in ms (> 0)
-- ARGV[1+2k], ARGV[2+2k]  the k-th schedule's name and the SHA-1 (hex) of
--          its definition as the supervisor has it
--
-- Returns one status per schedule: 0 the stored definition is the same, 1
-- none is stored (the caller upserts it), 2 another one is stored (another
-- supervisor's config differs: the last one started or reloaded wins), 3
-- refused (one of its keys holds the wrong type: nothing written for it).
-- A state hash without a usable since_ms gets now: no slot before it fires.
local defs, id, hold_ms = KEYS[1], ARGV[1], tonumber(ARGV[2])
--- @include "now_ms"
--- @include "schedule"

local now = now_ms()
local defs_type = redis.call('TYPE', defs)['ok']
local out = {}
for k = 1, (#ARGV - 2) / 2 do
  local state, declarers = KEYS[2 * k], KEYS[2 * k + 1]
  local name, digest = ARGV[1 + 2 * k], ARGV[2 + 2 * k]
  local st, dt = redis.call('TYPE', state)['ok'], redis.call('TYPE', declarers)['ok']
  if (defs_type ~= 'none' and defs_type ~= 'hash') or (st ~= 'none' and st ~= 'hash')
      or (dt ~= 'none' and dt ~= 'zset') then
    out[k] = 3
  else
    declare(declarers, id, now, hold_ms)
    if not ms_field(redis.call('HGET', state, 'since_ms')) then
      redis.call('HSET', state, 'since_ms', now)
    end
    local def = redis.call('HGET', defs, name)
    if not def then out[k] = 1 elseif redis.sha1hex(def) ~= digest then out[k] = 2 else out[k] = 0 end
  end
end
return out
