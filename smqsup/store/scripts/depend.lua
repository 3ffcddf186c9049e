-- Register a held message (hold.lua) with its parents in one queue
-- partition, or learn that they ended already (store/ops/workflows.py). Runs on
-- the parents' slot: a parent's end is either before this (its record says
-- it) or after (its end finds the child in KEYS[3]: includes/deps.lua),
-- never lost between the two.
--
-- KEYS[1]  tracking hash of the parents' queue, KEYS[2] its expiry set
-- KEYS[3]  deps set of the parents' queue ("c" entries)
-- ARGV[1]  the child, "CQ\tCID" (its queue partition and id)
-- ARGV[2..] ids of the parents in this queue partition
--
-- Returns three per parent, in order: its id, its outcome and data: "wait"
-- and "" (registered: its end tells the child), "done" and its result
-- (JSON text), "dead" and its dead-letter metadata (JSON text), "unknown"
-- and "" (no record: never tracked here, or past its result_ttl). A record
-- that is not one track.lua wrote counts as running (registered): the
-- parent's end overwrites it and tells the child.
local tracked, expiry, deps, child = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
--- @include "now_ms"
--- @include "record_state"

local at_ms = now_ms()
local out = {}
for i = 2, #ARGV do
  local pid = ARGV[i]
  local raw = redis.call('HGET', tracked, pid)
  local gone = tonumber(redis.call('ZSCORE', expiry, pid) or '')
  local outcome, data = 'unknown', ''
  if raw and not (gone and gone <= at_ms) then
    local state = record_state(raw)
    if state == 'done' then
      outcome, data = 'done', redis.call('HGET', tracked, pid .. ':r') or 'null'
    elseif state == 'dead' or state == 'cancelled' then
      outcome, data = 'dead', string.match(raw, ',"meta":(.*)}$') or '{}'
    else
      outcome = 'wait'
      redis.call('ZADD', deps, 0, 'c\t' .. pid .. '\t' .. child)
    end
  end
  out[#out + 1] = pid
  out[#out + 1] = outcome
  out[#out + 1] = data
end
return out
