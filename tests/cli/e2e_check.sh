# Sourced by the CLI end-to-end scripts (they set $cli): check runs the CLI and compares its exit
# status and output; finish prints the closing line and fails when any check did.
passed=0
failures=0
check() {  # check NAME EXPECTED_STATUS EXPECTED_SUBSTRING -- ARGS...
  local name=$1 want_status=$2 want=$3; shift 4
  local out status
  out=$("$cli" "$@" 2>&1); status=$?
  if [ "$status" -ne "$want_status" ] || [[ "$out" != *"$want"* ]]; then
    echo "FAIL $name: status $status (want $want_status), output: $out"
    failures=$((failures + 1))
  else
    echo "ok   $name"
    passed=$((passed + 1))
  fi
}
finish() {
  echo "$passed passed, $failures failed"
  [ "$failures" -eq 0 ]
}
