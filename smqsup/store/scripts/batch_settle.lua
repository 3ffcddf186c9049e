-- Record the ends of members of a batch, and its close, then publish its
-- callbacks if it is complete (store/ops/batches.py has the protocol). Runs on
-- the slot of the batch's home queue (its on_complete queue, else its
-- on_success one). Each member counts once (KEYS[3]), and the callbacks are
-- published in the same step as the "fired" flag that says so, so that
-- whoever repeats a call (a drain that died before removing its outbox
-- entry) changes nothing: the callback fires exactly once.
--
-- KEYS[1]  the batch's hash: closed, fired, done, failed, created_ms,
--          fired_ms, complete and success (the callbacks' frames up to their
--          summary: "head|{...,\"body\":{\"batch\":...,\"body\":BODY"), tail
--          (what follows the summary), success_queue ("": on the home queue)
-- KEYS[2]  its members set, KEYS[3] its ended set (member ids)
-- KEYS[4]  its failures list: the first 100 failed members, JSON objects
-- KEYS[5]  the home queue's set of open batches (score: created, ms)
-- KEYS[6]  the home queue's pending list, KEYS[7] its priority set, KEYS[8]
--          its sequence counter
-- KEYS[9]  the home queue's deps set (includes/deps.lua: "S" entries, an
--          on_success callback for another queue)
-- KEYS[10] the home queue's tracking hash, KEYS[11] its expiry set, KEYS[12]
--          its event stream (a callback is tracked as its head says)
-- ARGV[1]  the batch's id (its member of KEYS[5])
-- ARGV[2]  "1": close it (no more members from its producer)
-- ARGV[3]  how long its keys last once it fired, s
-- ARGV[4..] three per ended member: its id, "done" or "dead", and for a dead
--          one the JSON object its failure is listed as (else "")
--
-- Returns {fired, told}: fired 1 when this call published its callbacks;
-- {0, 0} for a batch whose hash is gone (nothing is written then);
-- told 1 when it left an on_success callback for another queue in KEYS[9].
-- A key of the wrong type among KEYS[1..9] is an error reply naming it
-- ("WRONGTYPE <key> holds a ...") before anything is written: Redis does
-- not roll a script back, and a member counted in KEYS[3] but not in the
-- counts would never be counted again.
local batch, members, ended, failures, index = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pending, prio_set, prio_seq, deps = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local T = {hash = KEYS[10], expiry = KEYS[11], events = KEYS[12]}
--- @include "wrong_type"
--- @include "now_ms"
--- @include "ready"
--- @include "track"

-- A batch Redis holds nothing of (past its keep time after it fired, or
-- never opened) counts nothing: its keys are not made again, without expiry.
if redis.call('EXISTS', batch) == 0 then return {0, 0} end
local refused = wrong_type({{batch, 'hash'}, {members, 'set'}, {ended, 'set'}, {failures, 'list'},
                            {index, 'zset'}, {pending, 'list'}, {prio_set, 'zset'}, {deps, 'zset'}})
if refused then return refused end
for i = 4, #ARGV - 2, 3 do
  local id, outcome = ARGV[i], ARGV[i + 1]
  redis.call('SADD', members, id)
  if redis.call('SADD', ended, id) == 1 then
    if outcome == 'done' then
      redis.call('HINCRBY', batch, 'done', 1)
    else
      redis.call('HINCRBY', batch, 'failed', 1)
      if redis.call('LLEN', failures) < 100 then redis.call('RPUSH', failures, ARGV[i + 2]) end
    end
  end
end
if ARGV[2] == '1' then redis.call('HSET', batch, 'closed', '1') end

local f = redis.call('HMGET', batch, 'closed', 'fired', 'done', 'failed', 'complete', 'success', 'success_queue',
                     'tail')
if f[1] ~= '1' or f[2] == '1' or redis.call('SCARD', ended) < redis.call('SCARD', members) then return {0, 0} end
local at_ms = now_ms()
redis.call('HSET', batch, 'fired', '1', 'fired_ms', at_ms)
local failed = tonumber(f[4] or '0') or 0
local summary = ',"done":' .. string.format('%d', tonumber(f[3] or '0') or 0) .. ',"failed":'
  .. string.format('%d', failed) .. ',"failures":[' .. table.concat(redis.call('LRANGE', failures, 0, 99), ',')
  .. ']}' .. (f[8] or '}')
local told = 0
if f[5] then
  local frame = f[5] .. summary
  make_ready(pending, prio_set, prio_seq, frame)
  track(T, frame, 'waiting', 'published', at_ms)
end
if f[6] and failed == 0 then
  if (f[7] or '') == '' then
    local frame = f[6] .. summary
    make_ready(pending, prio_set, prio_seq, frame)
    track(T, frame, 'waiting', 'published', at_ms)
  else
    redis.call('ZADD', deps, 0, 'S\t' .. f[7] .. '\t' .. f[6] .. summary)
    told = 1
  end
end
redis.call('ZREM', index, ARGV[1])
for i = 1, 4 do redis.call('EXPIRE', KEYS[i], tonumber(ARGV[3])) end
return {1, told}
