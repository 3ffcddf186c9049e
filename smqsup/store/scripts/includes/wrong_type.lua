-- wrong_type(expected): refuse before the first write when a key holds
-- another type than the script needs.
--
-- expected  a list of {key, type}, type as TYPE names it ('list', 'zset',
--           'hash'); a key that does not exist is fine
-- Returns an error reply "WRONGTYPE <key> holds a <type>, not a <type>" for
-- the first key of another type, or nil.
--
-- Why: Redis does not roll a script back when a command fails half-way. A
-- frame popped from one list and then refused by the next (a key anyone with
-- access replaced by a string or a hash) would be lost; checked first, the
-- script changes nothing and the message stays where it was.
local function wrong_type(expected)
  for _, e in ipairs(expected) do
    local found = redis.call('TYPE', e[1])['ok']
    if found ~= 'none' and found ~= e[2] then
      return redis.error_reply('WRONGTYPE ' .. e[1] .. ' holds a ' .. found .. ', not a ' .. e[2]
        .. ': nothing done')
    end
  end
  return nil
end
