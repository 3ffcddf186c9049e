-- Set outbox entries whose target Redis refused aside (store/ops/parked.py),
-- so that none of them holds the entries behind it: out of the deps set
-- into the parked set, due again after a backoff that doubles with each
-- failure on their target queue, up to ARGV[2]; that queue's record says
-- how many of its entries wait, how often they failed, since when, why and
-- for which target last. An entry parked already (a retry that failed
-- again) only gets its new time.
--
-- KEYS[1]  deps set of the partition (includes/deps.lua)
-- KEYS[2]  its parked set: entry -> when to try it again (ms, Redis clock)
-- KEYS[3]  its failures hash: "KIND\tQUEUE" (entries of that kind for
--          that target queue) -> JSON record {failures, since_ms, retry_ms,
--          entries, parked, reason, target}
-- ARGV[1]  first backoff, ms; ARGV[2] the longest, ms
-- ARGV[3]  failures after which a target counts as parked
-- ARGV[4..] per field: the field, the reason (Redis's error text), the id
--          of the target that failed last, the number N of its entries,
--          then those N entries (bytes as stored)
--
-- Returns the number of entries set aside. A key of the wrong type among
-- KEYS is an error reply naming it before anything is written: the entries
-- then stay where they were.
local deps, parked, failures = KEYS[1], KEYS[2], KEYS[3]
local base, most, park_after = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
--- @include "wrong_type"
--- @include "now_ms"

local refused = wrong_type({{deps, 'zset'}, {parked, 'zset'}, {failures, 'hash'}})
if refused then return refused end
local at_ms = now_ms()
local moved, i = 0, 4
while i + 3 <= #ARGV do
  local field, reason, target, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]) or 0
  -- (a record that is garbage, written by hand, starts afresh)
  local ok, rec = pcall(cjson.decode, redis.call('HGET', failures, field) or '{}')
  if not ok or type(rec) ~= 'table' then rec = {} end
  local failed = math.max(0, math.floor(tonumber(rec.failures) or 0)) + 1
  local due = at_ms + math.floor(math.min(most, base * 2 ^ math.min(failed - 1, 40)))
  local added = 0
  for j = i + 4, i + 3 + n do
    redis.call('ZREM', deps, ARGV[j])
    added = added + redis.call('ZADD', parked, due, ARGV[j])
  end
  local since = tonumber(rec.since_ms) or at_ms
  local entries = math.max(0, math.floor(tonumber(rec.entries) or 0)) + added
  redis.call('HSET', failures, field, cjson.encode({failures = failed, since_ms = since, retry_ms = due,
                                                   entries = entries, parked = failed >= park_after,
                                                   reason = reason, target = target}))
  moved = moved + added
  i = i + 4 + n
end
return moved
