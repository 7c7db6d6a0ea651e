#!/usr/bin/env bash
# The installed-style binary against a live reference server ($HF3FS_META_URL, set by with_server).
set -u
cli=$1
. "$(dirname "$0")/e2e_check.sh"
check init 0 "Rank 3 initialized with 8 pages" -- init 3 --pages 8
check allocate 0 '"allocations":[{"key":"k1","page":0},{"key":"k2","page":1}]' -- --json allocate 3 k1 k2
check confirm 0 '"ok":true' -- --json confirm 3 k1=0 --release 1
check exists 0 '"exists":[true,false]' -- --json exists k1 k2
check locations 0 "k1 0" -- locations 3 k1 k2
check unknown-rank 1 '"code":"rank_not_initialized"' -- --json allocate 4 k1
check ensure-pages 0 '"attempts":2,"reinitialized":true' -- --json allocate 4 k1 --ensure-pages 4
check stale 1 '"code":"stale_allocation"' -- --json confirm 3 k9=5
check raw 0 '"status":200' -- --json raw /keys/batch_exists '{"keys":["k1"]}'
check raw-404 1 '"code":"unexpected_status"' -- --json raw /nope '{}'
check usage 2 "unknown command" -- frobnicate
check invalid-argument 2 '"code":"invalid_argument"' -- --json confirm 3 k1=-2
# Refused for sure: the server's own port, on a loopback address it does not listen on (the server
# holds the port, so nothing else can listen on it for every address; port 1 could be taken).
refusing_url=${HF3FS_META_URL/127.0.0.1/127.0.0.2}
check no-server 3 '"code":"connection_failed"' -- --json --url "$refusing_url" --deadline-ms 300 exists k1
check clear 0 "ok" -- clear
finish
