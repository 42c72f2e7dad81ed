-- Refunds or charges, unconditionally.
--
-- args[1]: the time in microseconds, or '' for the server's TIME. args[2]: the limits (see
-- `take`), then how many items, and per item: key index, limit index, amount, kind
-- (1 refund, 2 charge), charged_at (for a refund). Returns the time used.
local function adjust(call_keys, args)
  local now = begin(call_keys, args)
  for _ = 1, take() do
    local k, l, amount, kind, charged_at = spec[at + 1], spec[at + 2], spec[at + 3], spec[at + 4], spec[at + 5]
    at = at + 5
    local L = limits[l]
    local s, algorithm = current(k, L, now)
    if kind == 1 then
      algorithm.refund(s, L, now, amount, charged_at)
    else
      algorithm.consume(s, L, now, amount)
    end
    dirty[k] = true
  end
  write_back(now)
  return now
end
