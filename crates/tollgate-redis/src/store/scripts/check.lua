-- Decides a batch of checks, each all-or-nothing, in order.
--
-- args[1]: the time in microseconds, or '' for the server's TIME. args[2]: the limits (see
-- `take`), then how many checks, and per check its item count n and per item: key index
-- (into keys), limit index (into the limits), cost; or, for a check of one item whose
-- numbers fit, the one negative number -(key index * 2^20 + limit index * 2^10 + cost): one
-- number for cjson to read instead of four. Returns one string: the time, then six numbers
-- per item (see `describe`), each 8 bytes.
local function check(call_keys, args)
  local now = begin(call_keys, args)
  local reply, r = { pack('>i8', now) }, 1
  local item_keys, item_states, item_limits, costs, admits
  for _ = 1, take() do
    local n, k, L, cost = spec[at + 1]
    if n < 0 then
      local packed = -n
      cost = packed % 1024
      packed = (packed - cost) / 1024
      local l = packed % 1024
      k, L = (packed - l) / 1024, limits[l]
      at = at + 1
    elseif n == 1 then
      k, L, cost = spec[at + 2], limits[spec[at + 3]], spec[at + 4]
      at = at + 4
    end
    if k then
      local s, algorithm = current(k, L, now)
      local admitted = algorithm.admits(s, L, now, cost)
      if admitted then
        algorithm.consume(s, L, now, cost)
        if cost > 0 then dirty[k] = true end
      end
      r = r + 1
      reply[r] = describe(s, L, algorithm, now, cost, admitted)
    else
      at = at + 1
      if item_keys == nil then item_keys, item_states, item_limits, costs, admits = {}, {}, {}, {}, {} end
      local admitted = true
      for j = 1, n do
        local k, L, cost = spec[at + 1], limits[spec[at + 2]], spec[at + 3]
        at = at + 3
        local s, algorithm = current(k, L, now)
        local ok = algorithm.admits(s, L, now, cost)
        admitted = admitted and ok
        item_keys[j], item_states[j], item_limits[j], costs[j], admits[j] = k, s, L, cost, ok
      end
      for j = 1, n do
        local k, s, L, cost = item_keys[j], item_states[j], item_limits[j], costs[j]
        local algorithm = L.algorithm
        if admitted then
          algorithm.consume(s, L, now, cost)
          if cost > 0 then dirty[k] = true end
        end
        r = r + 1
        reply[r] = describe(s, L, algorithm, now, cost, admitted or admits[j])
      end
    end
  end
  write_back(now)
  return table.concat(reply)
end
