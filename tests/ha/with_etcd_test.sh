#!/usr/bin/env bash
# scripts/with_etcd against the real etcd: COMMAND sees a working 3-member cluster in
# $HF3FS_META_ETCD (written through one member, read through another), its exit status is
# with_etcd's, and afterwards no member runs and the data dirs are gone. Usage: with_etcd_test.sh WITH_ETCD
set -euo pipefail
with_etcd=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Inside the cluster: check the URLs, put through the first member, read through the last, note the
# members' PIDs and data dirs (the etcd processes listening on our client ports), exit 7.
cat >"$scratch/inside.sh" <<'INSIDE'
set -euo pipefail
IFS=, read -r -a urls <<<"$HF3FS_META_ETCD"
[ ${#urls[@]} -eq 3 ] || { echo "HF3FS_META_ETCD has ${#urls[@]} URLs: $HF3FS_META_ETCD" >&2; exit 1; }
for url in "${urls[@]}"; do
  case $url in http://127.0.0.1:[0-9]*) ;; *) echo "not a loopback URL: $url" >&2; exit 1 ;; esac
  pgrep -f -- "--listen-client-urls $url( |$)" >>"$1/pids"
  pgrep -af -- "--listen-client-urls $url( |$)" | grep -o -- "--data-dir [^ ]*" | cut -d' ' -f2 >>"$1/dirs"
done
curl -s --noproxy '*' -m 5 -X POST -d '{"key":"d2l0aC1ldGNk","value":"b2s="}' "${urls[0]}/v3/kv/put" >/dev/null
curl -s --noproxy '*' -m 5 -X POST -d '{"key":"d2l0aC1ldGNk"}' "${urls[2]}/v3/kv/range" | grep -q '"value":"b2s="' \
  || { echo "the value put through ${urls[0]} is not read back through ${urls[2]}" >&2; exit 1; }
exit 7
INSIDE

status=0
"$with_etcd" -- bash "$scratch/inside.sh" "$scratch" || status=$?
[ $status -eq 7 ] || fail "with_etcd exited $status, COMMAND exited 7"
[ "$(wc -l <"$scratch/pids")" -eq 3 ] || fail "expected 3 member PIDs, got: $(cat "$scratch/pids")"
while read -r pid; do
  ! kill -0 "$pid" 2>/dev/null || fail "etcd member $pid still runs after with_etcd"
done <"$scratch/pids"
while read -r dir; do
  [ ! -e "$dir" ] || fail "data dir $dir is left behind"
done <"$scratch/dirs"

status=0
"$with_etcd" --members 1 >/dev/null 2>&1 || status=$?
[ $status -eq 2 ] || fail "with_etcd without -- COMMAND exited $status, not 2"
status=0
HF3FS_META_ETCD_BIN=/nonexistent/etcd "$with_etcd" -- true 2>/dev/null || status=$?
[ $status -eq 1 ] || fail "with_etcd without an etcd binary exited $status, not 1"
echo "with_etcd_test: ok"
