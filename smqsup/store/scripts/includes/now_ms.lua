-- now_ms(): the Redis server's clock in whole milliseconds (TIME, rounded
-- down), the one clock every score and age in these keys is measured by.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- now_ms_up(): the same clock rounded up to the next whole ms.
local function now_ms_up()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
end
