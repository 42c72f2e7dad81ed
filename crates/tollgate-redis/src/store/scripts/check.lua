-- Decides a batch of checks, each all-or-nothing, in order.
--
-- ARGV[1]: the time in microseconds, or '' for the server's TIME. ARGV[2]: how many checks.
-- Then per check: its item count n, and per item: key index (into KEYS), alg, count, period,
-- capacity, interval, delay_after, cost. Returns {now, decisions...} with six numbers per item.
local now = clock()
local reply = { now }
local i = 3
for _ = 1, tonumber(ARGV[2]) do
  local n = tonumber(ARGV[i])
  i = i + 1
  local items = {}
  local admitted = true
  for j = 1, n do
    local L = read_limit(i + 1)
    local item = { cached = current(tonumber(ARGV[i]), L, now), limit = L, cost = tonumber(ARGV[i + 7]) }
    item.admits = A[L.alg].admits(item.cached.state, L, now, item.cost)
    admitted = admitted and item.admits
    items[j] = item
    i = i + 8
  end
  for j = 1, n do
    local item = items[j]
    local s, L = item.cached.state, item.limit
    if admitted then
      A[L.alg].consume(s, L, now, item.cost)
      if item.cost > 0 then item.cached.dirty = true end
    end
    local decision = describe(s, L, now, item.cost, admitted or item.admits)
    for _, value in ipairs(decision) do reply[#reply + 1] = value end
  end
end
write_back(now)
return reply
