#!/usr/bin/env bash
# The CLI binary against a live server started with --auth-token-file TOKEN_FILE ($HF3FS_META_URL).
set -u
cli=$1
token_file=$2
failures=0
check() {  # check NAME EXPECTED_STATUS EXPECTED_SUBSTRING TOKEN_ENV -- ARGS...
  local name=$1 want_status=$2 want=$3 token=$4; shift 5
  local out status
  if [ "$token" = "-" ]; then
    out=$(env -u HF3FS_META_TOKEN "$cli" "$@" 2>&1); status=$?
  else
    out=$(HF3FS_META_TOKEN=$token "$cli" "$@" 2>&1); status=$?
  fi
  if [ "$status" -ne "$want_status" ] || [[ "$out" != *"$want"* ]]; then
    echo "FAIL $name: status $status (want $want_status), output: $out"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}
token=$(tr -d '[:space:]' < "$token_file")
check no-token 1 '"status":401' - -- --json --attempts 1 exists k1
check token-file 0 '"exists":[false]' - -- --json --token-file "$token_file" exists k1
check token-env 0 "Rank 1 initialized" "$token" -- init 1 --pages 4
check wrong-env 1 'Invalid authentication credentials' wrong -- --attempts 1 clear
check file-over-env 0 "ok" wrong -- --token-file "$token_file" clear
check missing-file 2 "--token-file" - -- --token-file /nonexistent/token clear
echo "$((6 - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
