-- Forget parked outbox entries whose call ran at last (store/ops/parked.py):
-- out of the parked set, and off their target queue's record, which goes
-- with its last entry.
--
-- KEYS[1]  parked set of the partition (outbox_park.lua)
-- KEYS[2]  its failures hash (outbox_park.lua)
-- ARGV[1..] per field (outbox_park.lua's; "": entries of no target, such as
--          garbage), the number N of its entries, then those N entries
--
-- Returns the number of entries removed. A key of the wrong type is an
-- error reply naming it before anything is written.
local parked, failures = KEYS[1], KEYS[2]
--- @include "wrong_type"

local refused = wrong_type({{parked, 'zset'}, {failures, 'hash'}})
if refused then return refused end
local removed, i = 0, 1
while i + 1 <= #ARGV do
  local field, n = ARGV[i], tonumber(ARGV[i + 1]) or 0
  local gone = 0
  for j = i + 2, i + 1 + n do gone = gone + redis.call('ZREM', parked, ARGV[j]) end
  if field ~= '' then
    local ok, rec = pcall(cjson.decode, redis.call('HGET', failures, field) or '{}')
    local left = (ok and type(rec) == 'table' and tonumber(rec.entries) or 0) - gone
    if left > 0 then
      rec.entries = math.floor(left)
      redis.call('HSET', failures, field, cjson.encode(rec))
    else
      redis.call('HDEL', failures, field)
    end
  end
  removed = removed + gone
  i = i + 2 + n
end
return removed
