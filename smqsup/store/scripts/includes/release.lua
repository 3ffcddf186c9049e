-- release(dedup_key, id): free a dedup key early, only if it still names
-- the message ``id`` (compare-and-delete: a key taken since by another
-- message is left alone). Called when that message leaves the queue for
-- good: removed by an operator, or purged from the dead letters.
local function release(dedup_key, id)
  if redis.call('TYPE', dedup_key)['ok'] == 'string' and redis.call('GET', dedup_key) == id then
    redis.call('DEL', dedup_key)
  end
end
