--- @include "plain"
--- @include "group_firsts"
-- A group's turn on a queue without group limits, redeemed by take.lua
-- right after its plain hot path (so a plain run never makes these
-- functions), before its other includes; ack.lua redeems its one turn
-- inline, the same way, before any of these exists. includes/groups.lua
-- has the keys, the tickets and their invariants; its group_take, for a
-- queue with limits, takes the frame the same way (group_pop).
--
-- is_ticket(item): whether a pending list's item is a group's turn ("*NAME").
--
-- group_only(frame): whether the head says attempts, priority and group
-- alone ("A:P:0:0:0:0:G|", framing.py): no expiry to screen, no record,
-- event or link to write when it starts or ends, and, with no group limits,
-- no running count to keep (the collector's repair counts them for status).
--
-- group_pop(G, g): group ``g``'s first ready frame, taken out of G.ready
-- (G: the key names ready, count, state, pending), and whether the group
-- has another; nil when it has none. Its state and count entry go with its
-- last frame (or when it had none).
--
-- GT.turns (group_turn_lib(), below) redeems several at once, and
-- GT.popped those among the items a take popped.
local function is_ticket(item)
  return string.byte(item, 1) == 42  -- '*'
end

local function group_only(frame)
  return string.find(frame, GROUP_ONLY_HEAD) ~= nil
end

-- (The takes leave the group's count entry as it is, but for its last
-- frame: includes/groups.lua says why.)
local function group_pop(G, g)
  local firsts, frame = group_firsts(G.ready, g)
  if not frame then
    redis.pcall('HDEL', G.state, 's:' .. g)
    redis.pcall('ZREM', G.count, g)
    return nil, false
  end
  redis.pcall('ZREM', G.ready, firsts[1])
  if not firsts[2] then
    redis.pcall('ZREM', G.count, g)
    redis.pcall('HDEL', G.state, 's:' .. g)
  end
  return frame, firsts[2] ~= nil
end

-- The functions below are made on a run's first call of group_turn_lib()
-- (a run that redeems no more than one turn makes none of them): GT.turns
-- and GT.popped, said below.
local GT = nil
local function group_turn_lib()
  if GT then return GT end
  GT = {}
  -- GT.turns(G, names, again): the turns of several distinct groups,
  -- taken out of the pending list, redeemed at once (one read of their
  -- states: a paused group's turn ends; one ZREM of their frames, one
  -- write of the states and counts that end; a ZRANGEBYLEX each):
  -- {name -> its frame, or false};
  -- a name it leaves out was no group's ticket (nothing done for it). The
  -- tickets of the groups with more go into ``again``, in ``names``' order.
  function GT.turns(G, names, again)
    local out, fields = {}, {}
    for _, g in ipairs(names) do
      fields[#fields + 1], fields[#fields + 2] = 's:' .. g, 'p:' .. g
    end
    local said = #names > 0 and redis.pcall('HMGET', G.state, unpack(fields))
    if type(said) ~= 'table' or said.err then return out end
    local taken, ended, gone = {}, {}, {}
    for i, g in ipairs(names) do
      if said[2 * i - 1] == 't' then
        local firsts, frame = {}, nil
        if not said[2 * i] then firsts, frame = group_firsts(G.ready, g) end  -- (paused: its turn ends)
        out[g] = frame or false
        if frame then taken[#taken + 1] = firsts[1] end
        if frame and firsts[2] then
          again[#again + 1] = '*' .. g
        else
          ended[#ended + 1] = 's:' .. g
          if not said[2 * i] then gone[#gone + 1] = g end
        end
      end
    end
    if #taken > 0 then redis.pcall('ZREM', G.ready, unpack(taken)) end
    if #ended > 0 then redis.pcall('HDEL', G.state, unpack(ended)) end
    if #gone > 0 then redis.pcall('ZREM', G.count, unpack(gone)) end
    return out
  end
  -- GT.popped(G, items): the items popped from the pending list (G.pending),
  -- the groups' turns among them redeemed at once (GT.turns: each its frame
  -- in its place, or nothing; the turns of groups with more back at the far
  -- end in one LPUSH, in their order). Returns the frames; whether the
  -- caller may hand them all out as they are (else from the first item it
  -- could not redeem, or a second turn of one group among them, they are as
  -- popped, and a frame with more than a group to its head is still to be
  -- screened); and the turns redeemed.
  function GT.popped(G, items)
    local names, seen, stop = {}, {}, #items + 1
    for i, item in ipairs(items) do
      if not plain(item) then
        local g = is_ticket(item) and string.sub(item, 2)
        if not g or seen[g] then stop = i break end
        seen[g], names[#names + 1] = true, g
      end
    end
    local again = {}
    local turned = GT.turns(G, names, again)
    if #again > 0 then redis.call('LPUSH', G.pending, unpack(again)) end
    local frames, simple, turns = {}, stop > #items, 0
    for i = 1, #items do
      local item, frame = items[i], items[i]
      if i < stop and not plain(item) then
        frame = turned[string.sub(item, 2)]
        if frame == nil then frame, simple = item, false end  -- no group's turn: handed on as it is
        if frame ~= item then turns = turns + 1 end
        if frame and not group_only(frame) then simple = false end
      end
      if frame then frames[#frames + 1] = frame end
    end
    return frames, simple, turns
  end
  return GT
end
