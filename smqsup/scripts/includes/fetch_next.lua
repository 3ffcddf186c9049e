-- fetch_next(call, processing, pending, consumers, consumer_id, wanted): the
-- tail of an ack or a nack: whether the consumer is still registered, and
-- the next frame for it.
--
-- call         redis.pcall: a failing LMOVE means nothing fetched (ack.lua
--              pays no type check; the consumer's next BLMOVE reports the
--              key); redis.call: it is the caller's error reply (nack.lua)
-- wanted       true: move the oldest frame of ``pending`` into ``processing``
--
-- Returns registered (1 or 0), next (a frame or false). A consumer no longer
-- in ``consumers`` (declared dead and reclaimed) gets nothing: a frame moved
-- into a list no collector watches would wait there for ever.
local function fetch_next(call, processing, pending, consumers, consumer_id, wanted)
  local registered = redis.call('HEXISTS', consumers, consumer_id)
  local nxt = false
  if wanted and registered == 1 then
    nxt = call('LMOVE', pending, processing, 'RIGHT', 'LEFT')
    if type(nxt) == 'table' and nxt.err then nxt = false end
  end
  return registered, nxt
end
