-- Refunds or charges, unconditionally.
--
-- ARGV[1]: the time in microseconds, or '' for the server's TIME. ARGV[2]: how many items.
-- Then per item: key index, alg, count, period, capacity, interval, delay_after, amount,
-- kind (1 refund, 2 charge), charged_at (for a refund). Returns the time used.
local now = clock()
local i = 3
for _ = 1, tonumber(ARGV[2]) do
  local L = read_limit(i + 1)
  local cached = current(tonumber(ARGV[i]), L, now)
  local amount, kind = tonumber(ARGV[i + 7]), tonumber(ARGV[i + 8])
  if kind == 1 then
    A[L.alg].refund(cached.state, L, now, amount, tonumber(ARGV[i + 9]))
  else
    A[L.alg].consume(cached.state, L, now, amount)
  end
  cached.dirty = true
  i = i + 10
end
write_back(now)
return now
