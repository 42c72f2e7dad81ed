-- wrk's requests for scripts/bench-peers and scripts/ab-server: every request built before the
-- run, one a key with {key} filled in (a POST of the body, or a GET with the header), and taken
-- round robin; at the end it prints the same JSON fields as `tollgate-tools bench --json`,
-- every 2xx answer counted as allowed.
--
--   wrk --threads 2 --connections 32 --duration 5s --script scripts/wrk-requests.lua \
--       http://127.0.0.1:8080 -- /v1/check 10000 'BODY with {key}' 'name: value with {key}'
local list, n, threads = {}, 0, 0
function setup(thread)
    -- Every thread runs the script afresh: start each at its own key.
    thread:set("first", threads * 5000)
    threads = threads + 1
end
function init(args)
    local path, keys, body, header = args[1], tonumber(args[2]), args[3], args[4]
    local name, value = header:match("^([^:]+):%s*(.*)$")
    for key = 0, keys - 1 do
        local fill = function(text) return (text:gsub("{key}", tostring(key))) end
        local headers = {}
        if name then headers[name] = fill(value) end
        if body ~= "" then
            headers["Content-Type"] = "application/json"
            list[key + 1] = wrk.format("POST", path, headers, fill(body))
        else
            list[key + 1] = wrk.format("GET", path, headers)
        end
    end
    n = (first or 0) % keys
end
function request()
    n = n % #list + 1
    return list[n]
end
function done(summary, latency, _)
    local e = summary.errors
    local failed = e.connect + e.read + e.write + e.status + e.timeout
    io.write(string.format(
        '{"requests":%d,"throughput_per_second":%.1f,"allowed":%d,"denied":0,"failed":%d,' ..
        '"first_failure":%s,"latency_ms":{"p50":%.3f,"p99":%.3f}}\n',
        summary.requests, summary.requests / (summary.duration / 1e6), summary.requests - failed,
        failed, failed > 0 and '"a socket error or a status that is not 2xx"' or 'null',
        latency:percentile(50) / 1e3, latency:percentile(99) / 1e3))
end
