-- Read a range of a list or sorted set for a listing (smqsup messages, dlq
-- list, the web UI) within a byte budget: each element's length, and its
-- bytes whole while the budget affords them, else only its head. Reads only.
--
-- KEYS[1]  the list or sorted set
-- ARGV[1]  "list" or "zset": the type KEYS[1] must have
-- ARGV[2]  index of the first element (0-based; negative: from the end)
-- ARGV[3]  step from one element to the next: 1 or -1 (a sorted set: 1)
-- ARGV[4]  most elements to read (>= 1)
-- ARGV[5]  head, in bytes (>= 1): what an element not read whole shows of
--          its start (and, with ARGV[7], of what follows its first separator)
-- ARGV[6]  whole budget, in bytes: what reading elements whole may cost
--          beyond what their heads would have
-- ARGV[7]  separator: "" (none), or "\n" for dead-letter entries
--          ("meta\nframe"), whose frame's head a cut entry shows too
--
-- Returns {type, whole budget left, then five per element read, in order:
-- length (bytes); bytes (whole, or when cut its first ARGV[5], with ARGV[7]
-- none past its first separator); the first ARGV[5] bytes after the first
-- separator (cut with ARGV[7] only, else false); score (a sorted set's, as
-- text, else false); digest (cut, and no message id at the head the reader
-- names it by: SHA-1 hex of the whole element, for its "raw-" reference,
-- else false)}. A key of another type, or none, reads nothing: {its type,
-- ARGV[6]}.
--
-- Bounded: an element costs the reply its head (twice with ARGV[7]), and
-- whole elements ARGV[6] beyond that, whatever Redis holds. Each element is
-- still copied whole into Lua (no command reads part of a list element),
-- and a cut one without an id hashed whole: the server's work grows with
-- the bytes in the range, one element at a time, but never the reply.
local key, kind = KEYS[1], ARGV[1]
local first, step, count = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local head, whole, sep = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local cut_cost = sep == '' and head or 2 * head

-- Whether ``s`` opens with a frame head and a message id, as framing.py's
-- peek_id reads one: 1-9 digits, optionally ":P:E" (one digit, 1-15
-- digits) then ":R" (1-8 digits) then ":V" (1-7 digits), '|{"id":"', 1-128
-- of A-Z a-z 0-9 _ . : -, '"'. Exactly that grammar: a cut element the
-- reader finds no id in always has its digest.
local function has_id(s)
  local attempts, at = string.match(s, '^([0-9]+)()')
  if not attempts or #attempts > 9 then return false end
  local expires, after = string.match(s, '^:[0-9]:([0-9]+)()', at)
  if expires then
    if #expires > 15 then return false end
    at = after
    for _, most in ipairs({8, 7, 1, 3}) do  -- R, then V, then L, then G
      local digits, next_at = string.match(s, '^:([0-9]+)()', at)
      if not digits then break end
      if #digits > most then return false end
      at = next_at
    end
  end
  local id = string.match(s, '^|{"id":"([A-Za-z0-9_.:%-]+)"', at)
  return id ~= nil and #id <= 128
end

-- A cut element as the reply shows it: its head (no further than its first
-- separator: what follows is the second head), the head after that
-- separator, and its digest when the head the reader names it by holds no
-- id (a dead letter by its frame when its metadata opens with '{', as
-- deadletters.py's cut rows do).
local function cut(element)
  local at = sep ~= '' and string.find(element, sep, 1, true)
  local shown, after = string.sub(element, 1, at and math.min(head, at) or head), false
  if at then after = string.sub(element, at + 1, at + head) end
  local named = (after and string.byte(element, 1) == 123) and after or shown
  return shown, after, (not has_id(named)) and redis.sha1hex(element)
end

local found = redis.call('TYPE', key)['ok']
if found ~= kind then return {found, whole} end
local out = {found, 0}
local function push(...)
  for i = 1, select('#', ...) do out[#out + 1] = select(i, ...) end
end
for n = 0, count - 1 do
  local index, element, score = first + n * step, nil, false
  if kind == 'list' then
    element = redis.call('LINDEX', key, index)
  else
    local got = redis.call('ZRANGE', key, index, index, 'WITHSCORES')
    element, score = got[1], got[2] or false
  end
  if not element then break end
  local size = #element
  if size <= cut_cost or size - cut_cost <= whole then
    whole = whole - math.max(0, size - cut_cost)
    push(size, element, false, score, false)
  else
    local shown, after, digest = cut(element)
    push(size, shown, after, score, digest)
  end
end
out[2] = whole
return out
