-- Writes one override if it is at the version the write replaces (0: absent), raising the
-- table's version. KEYS[1]: the table (a hash of id -> "<version> <body>"); KEYS[2]: the
-- table's version. ARGV[1]: the id; ARGV[2]: the version replaced; ARGV[3]: "1" to write
-- ARGV[4] as the body, "0" to remove the record.
-- Returns {1, new version} or {0, the record's current version}.
local stored = redis.call('HGET', KEYS[1], ARGV[1])
local current = 0
if stored then
  current = tonumber(string.match(stored, '^(%d+) '))
end
if current ~= tonumber(ARGV[2]) then
  return {0, current}
end
local version = redis.call('INCR', KEYS[2])
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1], version .. ' ' .. ARGV[4])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return {1, version}
