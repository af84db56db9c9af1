-- wrk script for bench/peers.py: POST the JSON body in $PEERS_BODY on every call, so each
-- server gets its own route's body from one script.
wrk.method = "POST"
wrk.body = os.getenv("PEERS_BODY")
wrk.headers["Content-Type"] = "application/json"
