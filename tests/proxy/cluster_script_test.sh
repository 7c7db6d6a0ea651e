#!/usr/bin/env bash
# scripts/cluster itself: a usage error exits 2 naming what is wrong; a command sees the cluster it
# asked for (its environment, every proxy healthy, with_etcd's etcd), its exit status is cluster's,
# and afterwards nothing cluster started runs and its files are gone; SIGTERM to cluster's PID stops
# it all, and SIGKILL to it (no trap runs) kills it all too.
# Usage: cluster_script_test.sh CLUSTER SERVER_BINARY PROXY_BINARY
set -uo pipefail
cluster=$1 server=$2 proxy=$3
fail() { echo "cluster_script_test: $*" >&2; exit 1; }

# expect_usage TEXT ARG...: cluster ARG... exits 2 and says TEXT.
expect_usage() {
  local want=$1 out status=0
  shift
  out=$("$cluster" "$@" 2>&1) || status=$?
  [ $status -eq 2 ] || fail "cluster $* exited $status, not 2: $out"
  grep -qF -- "$want" <<<"$out" || fail "cluster $* did not say '$want': $out"
}
bins=(--server "$server" --proxy "$proxy")
expect_usage "unknown argument '--bogus'" "${bins[@]}" --bogus -- true
expect_usage "--members must be 2 or 3, got '5'" "${bins[@]}" --members 5 -- true
expect_usage "--models: 'a b' is not a namespace name" "${bins[@]}" --models 'a b' -- true
expect_usage "--lease-ms must be a number of milliseconds, got '2s'" "${bins[@]}" --lease-ms 2s -- true
expect_usage "--deadline-ms needs a value" "${bins[@]}" --deadline-ms
expect_usage "-- must be followed by a COMMAND" "${bins[@]}" --
expect_usage "--server: '/nonexistent/server' is not an executable" --server /nonexistent/server --proxy "$proxy" -- true

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cat >"$scratch/inside.sh" <<'INSIDE'
out=$1
echo "$HF3FS_META_CLUSTER_DIR" >"$out/dir"
cat "$HF3FS_META_CLUSTER_DIR"/member-*/pid "$HF3FS_META_CLUSTER_DIR"/proxy-*/pid >"$out/pids"
IFS=, read -r -a proxies <<<"$HF3FS_META_PROXIES"
IFS=, read -r -a members <<<"$HF3FS_META_MEMBERS"
IFS=, read -r -a etcd <<<"$HF3FS_META_ETCD"
[ ${#proxies[@]} -eq 3 ] || { echo "proxies: $HF3FS_META_PROXIES"; exit 9; }
[ ${#members[@]} -eq 2 ] || { echo "members: $HF3FS_META_MEMBERS"; exit 9; }
[ ${#etcd[@]} -eq 3 ] || { echo "etcd: $HF3FS_META_ETCD"; exit 9; }
[ "$HF3FS_META_MODELS" = m1,m1,m2 ] || { echo "models: $HF3FS_META_MODELS"; exit 9; }
[ "$HF3FS_META_URL" = "$HF3FS_META_MEMBERS" ] || { echo "url: $HF3FS_META_URL"; exit 9; }
for u in "${proxies[@]}"; do
  [ "$(curl -s --noproxy '*' -m 5 "$u/healthz")" = '{"status":"ok"}' ] || { echo "$u/healthz not ok"; exit 9; }
done
exit 7
INSIDE
status=0
"$cluster" "${bins[@]}" --models m1,m1,m2 --members 2 -- bash "$scratch/inside.sh" "$scratch" || status=$?
[ $status -eq 7 ] || fail "cluster exited $status, the command 7"
[ -s "$scratch/pids" ] || fail "the command did not see the cluster's files"
[ "$(wc -l <"$scratch/pids")" -eq 5 ] || fail "not 2 members and 3 proxies: $(cat "$scratch/pids")"
while read -r pid; do
  ! kill -0 "$pid" 2>/dev/null || fail "process $pid still runs after cluster"
done <"$scratch/pids"
[ ! -e "$(cat "$scratch/dir")" ] || fail "$(cat "$scratch/dir") is left behind"

# SIGTERM to cluster's own PID (as a harness stops it) stops the command and everything cluster
# started, within its bounds.
rm -f "$scratch/pids"
# shellcheck disable=SC2016  # expanded by the command's shell
"$cluster" "${bins[@]}" -- bash -c 'cat "$HF3FS_META_CLUSTER_DIR"/*/pid >"$0/pids.tmp"; echo "$$" >>"$0/pids.tmp";
                                     echo "$HF3FS_META_CLUSTER_DIR" >"$0/dir"; mv "$0/pids.tmp" "$0/pids"; exec sleep 120' \
  "$scratch" >/dev/null 2>&1 &
outer=$!
for _ in $(seq 1 300); do [ -s "$scratch/pids" ] && break; sleep 0.1; done
[ -s "$scratch/pids" ] || fail "the cluster did not start within 30 s"
kill -TERM $outer
status=0
for _ in $(seq 1 300); do kill -0 $outer 2>/dev/null || break; sleep 0.1; done
kill -0 $outer 2>/dev/null && fail "cluster still runs 30 s after SIGTERM"
wait $outer || status=$?
[ $status -ne 0 ] || fail "cluster stopped by SIGTERM exited 0"
while read -r pid; do
  ! kill -0 "$pid" 2>/dev/null || fail "process $pid still runs after cluster was stopped"
done <"$scratch/pids"
[ ! -e "$(cat "$scratch/dir")" ] || fail "$(cat "$scratch/dir") is left behind"

# SIGKILL to cluster's PID (a harness's timeout) runs no trap: what it started, down to etcd, is
# killed with it (setpriv --pdeathsig), within a bound. Its files are left (nothing runs to remove
# them): under a TMPDIR of the scratch dir, which the EXIT trap removes.
rm -f "$scratch/pids" "$scratch/etcd"
mkdir -p "$scratch/tmp"
# shellcheck disable=SC2016  # expanded by the command's shell
TMPDIR=$scratch/tmp "$cluster" "${bins[@]}" -- bash -c 'cat "$HF3FS_META_CLUSTER_DIR"/*/pid >"$0/pids.tmp"; echo "$$" >>"$0/pids.tmp";
                                     echo "$HF3FS_META_ETCD" >"$0/etcd"; echo "$HF3FS_META_CLUSTER_DIR" >"$0/dir";
                                     mv "$0/pids.tmp" "$0/pids"; exec sleep 120' "$scratch" >/dev/null 2>&1 &
outer=$!
for _ in $(seq 1 300); do [ -s "$scratch/pids" ] && break; sleep 0.1; done
[ -s "$scratch/pids" ] || fail "the cluster did not start within 30 s"
kill -KILL $outer
wait $outer 2>/dev/null
gone() {
  local pid url
  while read -r pid; do ! kill -0 "$pid" 2>/dev/null || return 1; done <"$scratch/pids"
  IFS=, read -r -a etcd <<<"$(cat "$scratch/etcd")"
  for url in "${etcd[@]}"; do ! curl -s --noproxy '*' -m 1 "$url/health" >/dev/null || return 1; done
}
for _ in $(seq 1 100); do gone && break; sleep 0.1; done
gone || fail "10 s after SIGKILL to cluster, something it started still runs (pids: $(tr '\n' ' ' <"$scratch/pids"), etcd: $(cat "$scratch/etcd"))"
echo "cluster_script_test: ok"
