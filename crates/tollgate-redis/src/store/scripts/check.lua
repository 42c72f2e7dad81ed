-- Decides a batch of checks, each all-or-nothing, in order.
--
-- args[1]: the time in microseconds, or '' for the server's TIME. args[2]: the limits (see
-- `take`), then how many checks, and per check its item count n and per item: key index
-- (into keys), limit index (into the limits), cost. Returns {now, decisions...} with six
-- numbers per item.
local function check(call_keys, args)
  local now = begin(call_keys, args)
  local reply, r = { now }, 1
  local item_keys, item_states, item_limits, costs, admits = {}, {}, {}, {}, {}
  for _ = 1, take() do
    local n = take()
    local admitted = true
    for j = 1, n do
      local k, l, cost = spec[at + 1], spec[at + 2], spec[at + 3]
      at = at + 3
      local L = limits[l]
      local s = current(k, L, now)
      local ok = A[L.alg].admits(s, L, now, cost)
      admitted = admitted and ok
      item_keys[j], item_states[j], item_limits[j], costs[j], admits[j] = k, s, L, cost, ok
    end
    for j = 1, n do
      local k, s, L, cost = item_keys[j], item_states[j], item_limits[j], costs[j]
      if admitted then
        A[L.alg].consume(s, L, now, cost)
        if cost > 0 then dirty[k] = true end
      end
      r = describe(reply, r, s, L, now, cost, admitted or admits[j])
    end
  end
  write_back(now)
  return reply
end
