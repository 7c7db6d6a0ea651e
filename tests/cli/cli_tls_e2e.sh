#!/usr/bin/env bash
# The CLI binary against a live server serving HTTPS, with certificates made here:
#   cli_tls_e2e.sh SERVER CLI WITH_SERVER
set -u
server=$1 cli=$2 with_server=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make_cert() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$work/$1.key" -out "$work/$1.crt" 2>/dev/null
}
make_cert server && make_cert other || { echo "FAIL: openssl could not make the certificates"; exit 1; }

# shellcheck disable=SC2016
"$with_server" "$server" --tls-cert "$work/server.crt" --tls-key "$work/server.key" -- bash -c '
  cli=$1 work=$2
  . "$3"
  if [[ "$HF3FS_META_URL" == https://* ]]; then echo "ok   https-url"; passed=$((passed + 1)); else
    echo "FAIL https-url: $HF3FS_META_URL"; failures=$((failures + 1)); fi
  check right-ca 0 "Rank 1 initialized" -- --ca-file "$work/server.crt" init 1 --pages 4
  check right-ca-json 0 "\"exists\":[false]" -- --json --ca-file "$work/server.crt" exists k1
  check wrong-ca 3 "\"code\":\"connection_failed\"" -- --json --attempts 1 --ca-file "$work/other.crt" exists k1
  check system-cas 3 "certificate" -- --attempts 1 exists k1
  finish
' cli_tls_e2e "$cli" "$work" "$(dirname "$0")/e2e_check.sh"
