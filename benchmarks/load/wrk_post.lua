-- wrk script: POST the body in $WRK_BODY (JSON, or with $WRK_HEADER_LENGTH a V2 binary body: its JSON header's
-- length, sent as Inference-Header-Content-Length); optional $WRK_DELAY_MS between requests per connection (a
-- fixed offered rate); prints one JSON line with counts and percentiles.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if os.getenv("WRK_HEADER_LENGTH") then
  wrk.headers["Content-Type"] = "application/octet-stream"
  wrk.headers["Inference-Header-Content-Length"] = os.getenv("WRK_HEADER_LENGTH")
end
if os.getenv("WRK_API_KEY") then wrk.headers["X-API-Key"] = os.getenv("WRK_API_KEY") end
local f = assert(io.open(os.getenv("WRK_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
local delay_ms = tonumber(os.getenv("WRK_DELAY_MS") or "0")

local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) non2xx = 0 end
if delay_ms > 0 then
  function delay() return delay_ms end
end
function response(status, headers, body)
  if status < 200 or status > 299 then non2xx = non2xx + 1 end
end
function done(summary, latency, requests)
  local bad = 0
  for _, t in ipairs(threads) do bad = bad + t:get("non2xx") end
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "max_us": %d, "non2xx": %d, "socket_errors": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max, bad,
    e.connect + e.read + e.write + e.timeout))
end
