-- group_firsts(ready, g): group ``g``'s first two ready frames, as members
-- of the ready set ``ready`` (includes/groups.lua: "LEN:NAME\tPSEQ\nFRAME";
-- none: an empty table, or Redis's error where ``ready`` is garbage), and
-- the FRAME of the first (nil: none). One function for every script that
-- takes a group's next frame (ack.lua's hot path, includes/group_turn.lua),
-- so the members' layout is read in one place.
-- (Numbers in its command are written as text: Redis's Lua turns a number
-- into a command's argument with "%.14g", which costs more than the
-- command itself.)
local function group_firsts(ready, g)
  local p = #g .. ':' .. g .. '\t'
  local firsts = redis.pcall('ZRANGEBYLEX', ready, '[' .. p, '(' .. string.sub(p, 1, -2) .. '\n', 'LIMIT', '0', '2')
  if type(firsts) ~= 'table' or not firsts[1] then return firsts, nil end
  return firsts, string.sub(firsts[1], #p + 18)  -- (after "PSEQ\n": P one digit, SEQ fifteen)
end
