-- wrk script: POST one Open Inference Protocol (v2) infer request on every call.
-- Used for every echo server (Podium, MLServer) so all of them receive the same bytes.
wrk.method = "POST"
wrk.body = '{"inputs":[{"name":"input-0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
wrk.headers["Content-Type"] = "application/json"
