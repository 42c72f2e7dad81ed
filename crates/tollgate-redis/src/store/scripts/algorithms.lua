-- The six algorithms, piece for piece as in crates/tollgate/src/algorithm/*.rs. Every piece
-- computes exactly what its Rust twin computes: integers stay below 2^53 (where Lua's doubles
-- are exact), a Rust `saturating_sub` is a `math.max(0, ...)` here, and the sliding window
-- counter's floating point runs the same operations in the same order.
--
-- A limit L is {alg, count, period, capacity, interval, delay_after, debt, carry}; alg is 1 fixed_window,
-- 2 sliding_log, 3 sliding_window, 4 token_bucket, 5 leaky_bucket, 6 gcra, 7 fixed_window with a
-- calendar (which also has `bounds`, five period starts). A state is a table.

-- A function library's top level may not read globals (Redis runs it in a bare environment
-- while loading), so the standard functions and the table of built algorithms are picked up
-- by `begin` on the first call.
local floor, min, max, ceil, byte, format, match, pack, unpack_struct

local function window_start(now, period)
  return now - now % period
end

-- What of a charge filling `poured` microseconds still certainly counts (see `outstanding`).
local function outstanding(poured, charged_at, now)
  return max(0, poured - max(0, now - charged_at))
end

-- A stored state is its algorithm's tag (one letter) and its numbers: an instant is 7
-- big-endian bytes (struct's I7: exact below 2^56, and fast); window indices and counts are
-- hexadecimal. Either way values stay within Redis's smallest allocation for typical keys.
-- `encode` writes the whole value, tag included, with one C call; `decode` reads it whole.
local function unhex(text) return tonumber(text, 16) end
local function instant(tag, n) return pack('>BI7', tag, n) end
local function read_instant(text)
  if #text == 8 then return (unpack_struct('>I7', text, 2)) end
end

-- Lua creates a closure for every function definition it runs, and a script (EVALSHA) runs
-- its definitions on every call, so each algorithm's functions are built only when first used
-- (the builders are cheap; a call rarely touches more than two algorithms). As a Redis
-- Function library they are built once and kept.
local BUILD, A = {}
local function build(built, alg)
  local algorithm = BUILD[alg]()
  rawset(built, alg, algorithm)
  return algorithm
end

-- The windows it takes to pay off `units` at a quota's worth a window (one at most, where the
-- limit forgets debt with its window).
local function owed_windows(L, units)
  local windows = ceil(units / L.count)
  if L.carry or windows < 1 then return windows end
  return 1
end

-- 1: fixed window -------------------------------------------------------------------------
BUILD[1] = function() return {
  tag = 102, -- 'f'
  fresh = function(L, now) return { start = window_start(now, L.period), count = 0 } end,
  advance = function(s, L, now)
    local start = window_start(now, L.period)
    if start > s.start then
      if L.carry then s.count = max(0, s.count - (start - s.start) / L.period * L.count) else s.count = 0 end
      s.start = start
    end
  end,
  admits = function(s, L, now, cost) return cost <= L.count and s.count + cost <= L.count end,
  consume = function(s, L, now, cost) s.count = min(s.count + cost, L.count + L.debt) end,
  refund = function(s, L, now, amount, charged_at)
    if window_start(charged_at, L.period) == s.start then s.count = max(0, s.count - amount) end
  end,
  remaining = function(s, L, now) return max(0, L.count - s.count) end,
  reset_after = function(s, L, now)
    return max(0, s.start + owed_windows(L, s.count) * L.period - now)
  end,
  wait_for = function(s, L, now, cost)
    if cost > L.count then return nil end
    if s.count + cost <= L.count then return 0 end
    return max(0, s.start + owed_windows(L, s.count + cost - L.count) * L.period - now)
  end,
  -- The window is stored as its index; an index more than a period ahead of now can only come
  -- from a limit whose period was changed, and starts fresh.
  encode = function(s, L) return format('f%x:%x', s.start / L.period, s.count) end,
  decode = function(text, L, now)
    local window, count = match(text, '^f(%x+):(%x+)$')
    local start = window and unhex(window) * L.period
    if start and start <= now + L.period then return { start = start, count = unhex(count) } end
  end,
} end

-- 7: calendar window (calendar_window.rs): a fixed window over the period starts L.bounds,
-- computed by the caller around its time, of which the window holding `now` is picked --------
BUILD[7] = function()
  -- The window holding t: the last start at or before it among the first four.
  local function index_of(b, t)
    local i = 1
    for j = 2, 4 do if b[j] <= t then i = j end end
    return i
  end
  -- The start `windows` windows after `start` (the last known one at most, or if `start` is
  -- not among them).
  local function start_after(b, start, windows)
    for i = 1, 5 do
      if b[i] == start then return b[min(i + windows, 5)] end
    end
    return b[5]
  end
  local fixed = A[1]
  return {
  tag = 99, -- 'c'
  fresh = function(L, now) return { start = L.bounds[index_of(L.bounds, now)], count = 0 } end,
  advance = function(s, L, now)
    local b = L.bounds
    local i = index_of(b, now)
    if b[i] > s.start then
      -- Windows passed among the known starts; a state older than all of them is paid off.
      local passed
      for j = 1, i - 1 do
        if b[j] == s.start then passed = i - j end
      end
      if passed and L.carry then s.count = max(0, s.count - passed * L.count) else s.count = 0 end
      s.start = b[i]
    end
  end,
  admits = fixed.admits,
  consume = fixed.consume,
  refund = function(s, L, now, amount, charged_at)
    local b = L.bounds
    if charged_at >= b[1] and b[index_of(b, charged_at)] == s.start then s.count = max(0, s.count - amount) end
  end,
  remaining = fixed.remaining,
  reset_after = function(s, L, now)
    return max(0, start_after(L.bounds, s.start, owed_windows(L, s.count)) - now)
  end,
  wait_for = function(s, L, now, cost)
    if cost > L.count then return nil end
    if s.count + cost <= L.count then return 0 end
    return max(0, start_after(L.bounds, s.start, owed_windows(L, s.count + cost - L.count)) - now)
  end,
  -- The window is stored as its start: calendar windows have no common length to index by.
  encode = function(s, L) return format('c%x:%x', s.start, s.count) end,
  decode = function(text, L, now)
    local start, count = match(text, '^c(%x+):(%x+)$')
    if start then return { start = unhex(start), count = unhex(count) } end
  end,
} end

-- 2: sliding log: entries {at, units}, oldest first ---------------------------------------
BUILD[2] = function()
  -- What is owed at `at`: a quota's worth is paid off at the end of each period since owed_at.
  local function owed_left(s, L, at)
    if s.owed == 0 then return 0 end
    return max(0, s.owed - floor(max(0, at - s.owed_at) / L.period) * L.count)
  end
  -- When what is owed leaves room for `cost` (with nothing else counted).
  local function owed_room_at(s, L, cost)
    return s.owed_at + ceil(max(0, s.owed - (L.count - cost)) / L.count) * L.period
  end
  return {
  tag = 108, -- 'l'
  fresh = function(L, now) return { entries = {}, total = 0, owed = 0, owed_at = 0 } end,
  advance = function(s, L, now)
    local first = 1
    while s.entries[first] and s.entries[first][1] + L.period <= now do
      s.total = s.total - s.entries[first][2]
      first = first + 1
    end
    if first > 1 then
      local kept = {}
      for i = first, #s.entries do kept[#kept + 1] = s.entries[i] end
      s.entries = kept
    end
    if s.owed > 0 then
      local periods = floor(max(0, now - s.owed_at) / L.period)
      local owed = owed_left(s, L, now)
      if owed == 0 then
        s.owed, s.owed_at = 0, 0
      else
        s.owed, s.owed_at = owed, s.owed_at + periods * L.period
      end
    end
  end,
  admits = function(s, L, now, cost)
    return cost <= L.count and s.total + s.owed + cost <= L.count
  end,
  consume = function(s, L, now, cost)
    local logged = min(cost, max(0, L.count + min(L.count, L.debt) - s.total))
    if logged > 0 then
      s.total = s.total + logged
      local last = s.entries[#s.entries]
      if last and last[1] >= now then
        last[2] = last[2] + logged
      else
        s.entries[#s.entries + 1] = { now, logged }
      end
    end
    local owed = min(cost - logged, max(0, L.count + L.debt - (s.total + s.owed)))
    if owed > 0 then
      if s.owed == 0 then s.owed_at = now end
      s.owed = s.owed + owed
    end
  end,
  refund = function(s, L, now, amount, charged_at)
    for i = #s.entries, 1, -1 do
      local entry = s.entries[i]
      if entry[1] == charged_at then
        local taken = min(amount, entry[2])
        entry[2] = entry[2] - taken
        s.total = s.total - taken
        if entry[2] == 0 then table.remove(s.entries, i) end
        return
      end
    end
  end,
  remaining = function(s, L, now) return max(0, L.count - (s.total + s.owed)) end,
  reset_after = function(s, L, now)
    local last, logged, paid = s.entries[#s.entries], 0, 0
    if last then logged = last[1] + L.period end
    if s.owed > 0 then paid = s.owed_at + ceil(s.owed / L.count) * L.period end
    return max(0, max(logged, paid) - now)
  end,
  wait_for = function(s, L, now, cost)
    if cost > L.count then return nil end
    local total = s.total
    if total + owed_left(s, L, now) + cost <= L.count then return 0 end
    -- Room comes as entries age out and as periods pay off what is owed: the first of those
    -- instants at which the cost fits (what counts only falls with time).
    local function fits(t, at) return t + owed_left(s, L, at) + cost <= L.count end
    local steps = {}
    if s.owed > 0 then
      steps = { max(s.owed_at + L.period, now), max(owed_room_at(s, L, cost), now) }
      if steps[2] < steps[1] then steps[1], steps[2] = steps[2], steps[1] end
    end
    local next_step = 1
    for i = 1, #s.entries do
      local expiry = s.entries[i][1] + L.period
      while steps[next_step] and steps[next_step] < expiry do
        if fits(total, steps[next_step]) then return steps[next_step] - now end
        next_step = next_step + 1
      end
      total = total - s.entries[i][2]
      if fits(total, expiry) then return max(0, expiry - now) end
    end
    while steps[next_step] do
      if fits(total, steps[next_step]) then return steps[next_step] - now end
      next_step = next_step + 1
    end
    return max(0, owed_room_at(s, L, cost) - now)
  end,
  -- Entries as at,units pairs; what is owed, if anything, after a '!' as owed:owed_at.
  encode = function(s, L)
    local parts = {}
    for i = 1, #s.entries do parts[i] = format('%x,%x', s.entries[i][1], s.entries[i][2]) end
    local text = 'l' .. table.concat(parts, ';')
    if s.owed > 0 then text = text .. format('!%x:%x', s.owed, s.owed_at) end
    return text
  end,
  decode = function(text, L, now)
    local s = { entries = {}, total = 0, owed = 0, owed_at = 0 }
    for at, units in string.gmatch(text, '(%x+),(%x+)') do
      s.entries[#s.entries + 1] = { unhex(at), unhex(units) }
      s.total = s.total + unhex(units)
    end
    local owed, owed_at = match(text, '!(%x+):(%x+)$')
    if owed then s.owed, s.owed_at = unhex(owed), unhex(owed_at) end
    return s
  end,
} end

-- 3: sliding window counter ---------------------------------------------------------------
BUILD[3] = function()
  local function weighted(L, previous, elapsed)
    return previous * (L.period - elapsed) / L.period
  end

  local function fits(L, w, current, cost)
    return w + (current + cost) <= L.count
  end

  -- The first elapsed time in [from, period) at which the weighted predicate holds, or nil.
  local function first_admitting(L, previous, current, from, cost)
    local period = L.period
    local room = L.count - (current + cost)
    if room < 0 then return nil end
    if previous == 0 then return from end
    local used = current + cost
    local function holds(elapsed)
      return previous * (period - elapsed) / period + used <= L.count
    end
    local solved = math.ceil(period - room * period / previous)
    local guess = min(max(solved, from), period)
    while guess > from and holds(guess - 1) do guess = guess - 1 end
    while guess < period and not holds(guess) do guess = guess + 1 end
    if guess < period then return guess end
    return nil
  end

  -- The (previous, current) counts `windows` (at least 1) windows after the state's: each
  -- window pays off a quota's worth of the current count (see `carried` in Rust).
  local function carried(s, L, windows)
    if not L.carry then
      if windows == 1 then return s.current, 0 end
      return 0, 0
    end
    local paid_before = (windows - 1) * L.count
    return min(max(0, s.current - paid_before), L.count), max(0, s.current - (paid_before + L.count))
  end
  return {
  tag = 115, -- 's'
  fresh = function(L, now) return { start = window_start(now, L.period), previous = 0, current = 0 } end,
  advance = function(s, L, now)
    local start = window_start(now, L.period)
    if start > s.start then
      s.previous, s.current = carried(s, L, (start - s.start) / L.period)
      s.start = start
    end
  end,
  admits = function(s, L, now, cost)
    local elapsed = max(0, now - s.start)
    return cost <= L.count and fits(L, weighted(L, s.previous, elapsed), s.current, cost)
  end,
  consume = function(s, L, now, cost) s.current = min(s.current + cost, L.count + L.debt) end,
  refund = function(s, L, now, amount, charged_at)
    local window = window_start(charged_at, L.period)
    if window == s.start then
      s.current = max(0, s.current - amount)
    elseif window + L.period == s.start then
      s.previous = max(0, s.previous - amount)
    end
  end,
  remaining = function(s, L, now)
    local w = weighted(L, s.previous, max(0, now - s.start))
    local estimate = floor(L.count - (w + s.current))
    local guess = min(max(estimate, 0), max(0, L.count - s.current))
    while guess > 0 and not fits(L, w, s.current, guess) do guess = guess - 1 end
    while guess < L.count and fits(L, w, s.current, guess + 1) do guess = guess + 1 end
    return guess
  end,
  reset_after = function(s, L, now)
    if s.current > 0 then return max(0, s.start + (owed_windows(L, s.current) + 1) * L.period - now) end
    if s.previous > 0 then return max(0, s.start + L.period - now) end
    return 0
  end,
  wait_for = function(s, L, now, cost)
    if cost > L.count then return nil end
    local elapsed = max(0, now - s.start)
    local at
    local found = first_admitting(L, s.previous, s.current, elapsed, cost)
    if found then
      at = s.start + found
    else
      -- The first later window whose carried count leaves room, or the one after, or the one
      -- after that (where nothing is left of the state's counts).
      local first = 1
      if L.carry then first = max(1, ceil(max(0, s.current + cost - L.count) / L.count)) end
      at = s.start + (first + 2) * L.period
      for windows = first, first + 1 do
        local previous, current = carried(s, L, windows)
        found = first_admitting(L, previous, current, 0, cost)
        if found then at = s.start + windows * L.period + found; break end
      end
    end
    return max(0, at - now)
  end,
  encode = function(s, L) return format('s%x:%x:%x', s.start / L.period, s.previous, s.current) end,
  decode = function(text, L, now)
    local window, previous, current = match(text, '^s(%x+):(%x+):(%x+)$')
    local start = window and unhex(window) * L.period
    if start and start <= now + L.period then
      return { start = start, previous = unhex(previous), current = unhex(current) }
    end
  end,
} end

-- 4: token bucket -------------------------------------------------------------------------
BUILD[4] = function() return {
  tag = 116, -- 't'
  fresh = function(L, now) return { tokens = L.capacity, last = now } end,
  advance = function(s, L, now)
    if now <= s.last then return end
    local added = floor((now - s.last) / L.interval)
    local tokens = s.tokens + added
    if tokens >= L.capacity then
      s.tokens = L.capacity; s.last = now
    else
      s.tokens = tokens; s.last = s.last + added * L.interval
    end
  end,
  admits = function(s, L, now, cost) return cost <= L.capacity and s.tokens >= cost end,
  consume = function(s, L, now, cost) s.tokens = max(s.tokens - cost, -L.debt) end,
  refund = function(s, L, now, amount, charged_at)
    local interval = L.interval
    local poured = min(amount, L.capacity + L.debt) * interval
    local back = outstanding(poured, charged_at, now)
    local progress = max(0, now - s.last)
    local credit = min(s.tokens * interval + progress + back, L.capacity * interval)
    local tokens = floor(credit / interval)
    if tokens == L.capacity then
      s.tokens = tokens; s.last = now
    else
      s.tokens = tokens; s.last = now - (credit - tokens * interval)
    end
  end,
  remaining = function(s, L, now) return max(0, s.tokens) end,
  reset_after = function(s, L, now)
    local missing = L.capacity - s.tokens
    if missing <= 0 then return 0 end
    return max(0, s.last + missing * L.interval - now)
  end,
  wait_for = function(s, L, now, cost)
    if cost > L.capacity then return nil end
    local missing = cost - s.tokens
    if missing <= 0 then return 0 end
    return max(0, s.last + missing * L.interval - now)
  end,
  -- Stored as one instant: when the bucket will be full again. Tokens and refill progress
  -- follow from it exactly, as of any later time.
  encode = function(s, L) return instant(116, s.last + (L.capacity - s.tokens) * L.interval) end,
  decode = function(text, L, now)
    local full_at = read_instant(text)
    if not full_at then return nil end
    if full_at <= now then return { tokens = L.capacity, last = now } end
    local missing = math.ceil((full_at - now) / L.interval)
    return { tokens = L.capacity - missing, last = full_at - missing * L.interval }
  end,
} end

-- 5: leaky bucket, the water kept as the time it needs to drain ---------------------------
BUILD[5] = function() return {
  tag = 98, -- 'b'
  fresh = function(L, now) return { water = 0, last = now } end,
  advance = function(s, L, now)
    if now > s.last then s.water = max(0, s.water - (now - s.last)); s.last = now end
  end,
  admits = function(s, L, now, cost)
    return cost <= L.capacity and s.water + cost * L.interval <= L.capacity * L.interval
  end,
  consume = function(s, L, now, cost)
    s.water = min(s.water + cost * L.interval, (L.capacity + L.debt) * L.interval)
  end,
  refund = function(s, L, now, amount, charged_at)
    local poured = min(amount, L.capacity + L.debt) * L.interval
    s.water = max(0, s.water - outstanding(poured, charged_at, now))
  end,
  remaining = function(s, L, now)
    return floor(max(0, L.capacity * L.interval - s.water) / L.interval)
  end,
  reset_after = function(s, L, now) return max(0, s.last + s.water - now) end,
  wait_for = function(s, L, now, cost)
    if cost > L.capacity then return nil end
    local overflow = max(0, s.water + cost * L.interval - L.capacity * L.interval)
    return max(0, s.last + overflow - now)
  end,
  delay = function(s, L, now)
    if L.delay_after == 0 then return 0 end
    return max(0, s.last + s.water - (now + L.delay_after * L.interval))
  end,
  -- Stored as one instant: when the bucket will be empty.
  encode = function(s, L) return instant(98, s.last + s.water) end,
  decode = function(text, L, now)
    local empty_at = read_instant(text)
    if empty_at then return { water = max(0, empty_at - now), last = now } end
  end,
} end

-- 6: GCRA ----------------------------------------------------------------------------------
-- The most used algorithm: what runs for every decision compares instead of calling
-- math.max and math.min (a C call each, about 450 instructions), with the same results.
BUILD[6] = function() return {
  tag = 103, -- 'g'
  fresh = function(L, now) return { tat = now } end,
  advance = function(s, L, now) if s.tat < now then s.tat = now end end,
  admits = function(s, L, now, cost)
    return cost <= L.capacity and s.tat + cost * L.interval - now <= L.capacity * L.interval
  end,
  consume = function(s, L, now, cost)
    local tat, ceiling = s.tat + cost * L.interval, now + (L.capacity + L.debt) * L.interval
    if tat > ceiling then tat = ceiling end
    s.tat = tat
  end,
  refund = function(s, L, now, amount, charged_at)
    local poured = min(amount, L.capacity + L.debt) * L.interval
    s.tat = max(now, s.tat - outstanding(poured, charged_at, now))
  end,
  remaining = function(s, L, now)
    local room = L.capacity * L.interval - (s.tat - now)
    if room < 0 then return 0 end
    return floor(room / L.interval)
  end,
  reset_after = function(s, L, now) return s.tat - now end,
  wait_for = function(s, L, now, cost)
    if cost > L.capacity then return nil end
    local wait = s.tat + cost * L.interval - (L.capacity * L.interval + now)
    if wait < 0 then return 0 end
    return wait
  end,
  encode = function(s, L) return instant(103, s.tat) end,
  decode = function(text, L, now)
    local tat = read_instant(text)
    if tat then return { tat = tat } end
  end,
} end

-- Shared plumbing: reading the arguments and states, describing decisions -----------------
--
-- Everything above is built once when Redis loads the library (as a Redis Function) and kept
-- between calls; what follows is one call's state, set afresh by `begin` at the start of each.
--
-- What a decision costs Redis is mostly this plumbing and Redis's own glue, not the
-- arithmetic: a Lua function call (about 350 instructions), a C call such as math.max (450),
-- a table created (1 400 with its garbage), a number turned into text (2 200) each count.
-- So a limit carries its algorithm, resolved once; a one-item check (the common case) is
-- decided without the item tables; a state is written with one C call (`encode`); a TTL's
-- text is kept (`px_text`); and the reply is one string of packed integers, which Redis
-- passes on as it is, not a table of numbers it converts one by one (about 500 each).
-- `scripts/redis-script-cost --rev 9fe4402 --batch 1,16` (GCRA, fresh keys), instructions
-- inside redis-server per decision, before and after: 119 200 and 102 300 at one check a
-- call, 53 300 and 45 100 at 16. Of the 45 100 at 16 (callgrind_annotate --inclusive=yes on
-- the dump): 12 000 are the `SET ... PX` through redis.call (5 100 of it SET itself, 1 450
-- the table Lua makes of its OK), 4 000 cjson, 3 700 struct.pack (the reply and the state),
-- 1 900 key expiry, 2 000 Lua's garbage collector, 1 900 TIME and MGET.

-- args[2] is a JSON array of numbers (integers, exact below 2^53 as Lua's doubles are), read
-- in order: the number of distinct limits, each limit's seven parameters (alg, count, period,
-- capacity, interval, delay_after, debt: negative, as -1 - debt, for a window that forgets its
-- debt when it ends; a calendar window's five period starts follow), then what the entry point itself reads (see `take`). One
-- argument decoded by one C call, rather than an argument a number each passed through
-- `tonumber`, spares Redis a Lua string and a call per number; JSON keeps the argument text,
-- so `redis-cli` and `redis-benchmark` can still send it. (MessagePack, read by cmsgpack,
-- would cost a fifth of cjson's 900 instructions a number, but a server without FCALL answers
-- "unknown command" quoting the arguments, and binary there makes the reply unreadable to the
-- client, so that it cannot fall back to scripts.)
local spec, at, limits
local function take()
  at = at + 1
  return spec[at]
end

-- The call's keys; the stored state of keys[k] under L, brought forward to now, is cached for
-- the whole call so that later checks of the same call see what earlier ones wrote. A state
-- stored by another algorithm (the limit was reconfigured) starts fresh. Every key is read
-- with one MGET, on first use. Per key: its state, the limit it was read under (and so its
-- algorithm), and whether it changed.
local keys, stored, states, state_limits, dirty

-- On a Redis Cluster, a call may carry checks of several hash slots that one node holds: the
-- keys of the first slot are the call's declared keys, the others follow in args[4..] and
-- args[3] lists how many keys each further slot has (the library's check function is
-- registered with `allow-cross-slot-keys`). nil when every key is declared.
local slot_groups, declared

-- Runs a Redis command; a failure names the command, so that a Redis user without the
-- permission for it (Redis says only "can't run this command") learns which one it lacks.
-- Used for the commands made once a call (TIME, MGET): about 4 000 instructions a call, 3.5%
-- of a one-check call and nothing measurable at 16 (scripts/redis-script-cost); the per-key
-- writes call Redis directly, where it would cost every decision.
local function call(command, ...)
  local ok, result = pcall(redis.call, command, ...)
  if not ok then
    error(command .. ': ' .. (type(result) == 'table' and result.err or tostring(result)), 0)
  end
  return result
end

-- Redis counts TTLs on its own clock, which an explicit time need not follow, so with an
-- explicit time every TTL is padded by an hour lest a key vanish before its state is fresh.
local ttl_pad

-- Starts a call: reads its arguments, forgets the last call's states, and returns the call's
-- time: args[1] when given (tests and replays), else the Redis server's clock.
local function begin(call_keys, args)
  if A == nil then
    floor, min, max, ceil = math.floor, math.min, math.max, math.ceil
    byte, format, match = string.byte, string.format, string.match
    pack, unpack_struct = struct.pack, struct.unpack
    A = setmetatable({}, { __index = build })
  end
  keys, stored, states, state_limits, dirty = call_keys, nil, {}, {}, {}
  slot_groups, declared = nil, #call_keys
  if args[3] then
    slot_groups, keys = cjson.decode(args[3]), { unpack(call_keys) }
    for i = 4, #args do keys[#keys + 1] = args[i] end
  end
  spec, at, limits = cjson.decode(args[2]), 0, {}
  for l = 1, take() do
    local alg = spec[at + 1]
    limits[l] = {
      alg = alg, count = spec[at + 2], period = spec[at + 3],
      capacity = spec[at + 4], interval = spec[at + 5], delay_after = spec[at + 6],
      debt = spec[at + 7], carry = true, algorithm = A[alg],
    }
    if limits[l].debt < 0 then limits[l].debt, limits[l].carry = -1 - limits[l].debt, false end
    at = at + 7
    if alg == 7 then
      limits[l].bounds = { spec[at + 1], spec[at + 2], spec[at + 3], spec[at + 4], spec[at + 5] }
      at = at + 5
    end
  end
  if args[1] ~= '' then
    ttl_pad = 3600000000
    return tonumber(args[1])
  end
  ttl_pad = 0
  local t = call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Every key's stored value, read before anything is written: MGET reads one hash slot at a
-- time, and a key the node does not hold (its slot moved) fails the read, so that a call that
-- meets one has changed nothing and the client can send its checks again slot by slot.
local function read_stored()
  if slot_groups == nil then return call('MGET', unpack(keys)) end
  local values = call('MGET', unpack(keys, 1, declared))
  local from = declared + 1
  for g = 1, #slot_groups do
    local upto = from + slot_groups[g] - 1
    local part = call('MGET', unpack(keys, from, upto))
    for i = 1, #part do values[#values + 1] = part[i] end
    from = upto + 1
  end
  return values
end

-- The state of keys[k] under L as of now, and L's algorithm.
local function current(k, L, now)
  local algorithm = L.algorithm
  local s = states[k]
  if s == nil or state_limits[k].algorithm ~= algorithm then
    if stored == nil then stored = read_stored() end
    local raw = stored[k]
    if s ~= nil then dirty[k] = nil end
    s = nil
    if raw and byte(raw) == algorithm.tag then s = algorithm.decode(raw, L, now) end
    if s == nil then
      -- A fresh state is as of now already: `advance` would leave it as it is.
      s = algorithm.fresh(L, now)
      states[k], state_limits[k] = s, L
      return s, algorithm
    end
    states[k], state_limits[k] = s, L
  end
  algorithm.advance(s, L, now)
  return s, algorithm
end

-- A decision as the reply carries it: allowed (1 or 0), limit, remaining, reset_after,
-- retry_after (-1: never), delay, each a big-endian 64-bit signed integer.
local DECISION = '>i8i8i8i8i8i8'
local function describe(s, L, algorithm, now, cost, allowed)
  local delay = 0
  if allowed and algorithm.delay then delay = algorithm.delay(s, L, now) end
  return pack(DECISION, allowed and 1 or 0, L.capacity, algorithm.remaining(s, L, now),
    algorithm.reset_after(s, L, now), algorithm.wait_for(s, L, now, cost) or -1, delay)
end

-- The text of a TTL in milliseconds, as SET's PX takes it: written with '%d' (passed as a
-- number, Redis would write it with '%.17g', slower still) and kept, as a function library
-- keeps it between calls, so that the TTLs a limit's keys keep getting (all of them, for
-- TTLs of seconds) cost a table read instead of a string.format (1 200 instructions). At
-- most 4 096 are kept: a full table is dropped and filled anew.
local px_texts, px_count = {}, 0
local function px_text(ms)
  local text = px_texts[ms]
  if text == nil then
    text = format('%d', ms)
    if px_count == 4096 then px_texts, px_count = {}, 0 end
    px_texts[ms], px_count = text, px_count + 1
  end
  return text
end

-- Writes every changed state back with a TTL of its reset time, or deletes it when it is as
-- good as fresh.
local function write_back(now)
  for k = 1, #keys do
    if dirty[k] then
      local s, L = states[k], state_limits[k]
      local algorithm = L.algorithm
      local ttl = algorithm.reset_after(s, L, now)
      if ttl <= 0 then
        redis.call('DEL', keys[k])
      else
        redis.call('SET', keys[k], algorithm.encode(s, L), 'PX', px_text(ceil((ttl + ttl_pad) / 1000)))
      end
    end
  end
end
