-- wrk script for bench/sequences.py: POST {"value": 1} to the running-total model. With
-- SEQUENCES set (the env var: how many sequences run side by side), each request names a
-- sequence: request n goes to sequence n % SEQUENCES of generation n // (SEQUENCES * LENGTH), so
-- each sequence gets LENGTH requests, spread out so that one sequence rarely has two at once; the
-- last request of each sequence ends it (ts_request_sequence_id_end).
wrk.method = "POST"
wrk.body = '{"value": 1}'
wrk.headers["Content-Type"] = "application/json"

local sequences = tonumber(os.getenv("SEQUENCES") or "0")
local run = os.getenv("RUN") or "run"  -- each wrk run names its own sequences
local length = tonumber(os.getenv("LENGTH") or "20")
local n = 0

request = function()
   if sequences == 0 then
      return wrk.format(nil, nil, nil, nil)
   end
   local generation = math.floor(n / (sequences * length))
   local slot = n % sequences
   local step = math.floor(n / sequences) % length
   n = n + 1
   local headers = {["Content-Type"] = "application/json"}
   headers["ts_request_sequence_id"] = run .. "-g" .. generation .. "-s" .. slot
   if step == length - 1 then
      headers["ts_request_sequence_id_end"] = "true"
   end
   return wrk.format(nil, nil, headers, nil)
end

local non200 = 0
response = function(status, headers, body)
   if status ~= 200 then
      non200 = non200 + 1
   end
end
