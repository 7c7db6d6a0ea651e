#!/usr/bin/env bash
# verify_units.sh SYSTEMD_ANALYZE UNIT...: `systemd-analyze verify` finds nothing wrong in each unit.
# verify exits 0 on most mistakes (an unknown key, a bad value: "..., ignoring"), so a unit passes
# only with exit 0 and no line naming it; lines about the host's other units are not ours to judge.
# `systemd-analyze security --offline` then rates the sandboxing: exposure at most 2.0 ("OK"; the
# units are 1.6 today). Broken copies of each unit must fail the same checks, so that they cannot
# pass vacuously. Exit 77 (skipped) without systemd-analyze.
set -euo pipefail
analyze=$1; shift
if [ ! -x "$analyze" ]; then
  echo "systemd-analyze not found (scripts/bootstrap installs systemd): skipped"; exit 77
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# check UNIT: 0 if verify is silent about UNIT and exits 0; else prints why and returns 1.
check() {
  local unit=$1 name out rc=0
  name=$(basename "$unit")
  # --man=no: Documentation= is not looked up in man pages (none are installed); no PID 1 systemd
  # is needed, verify loads the unit files itself.
  out=$(SYSTEMD_LOG_LEVEL=info "$analyze" verify --man=no "$unit" 2>&1) || rc=$?
  local ours
  ours=$(grep -F -- "$name" <<<"$out" || true)
  if [ "$rc" -ne 0 ] || [ -n "$ours" ]; then
    echo "$unit: systemd-analyze verify exited $rc:"; echo "$out"
    return 1
  fi
  # --threshold is in tenths of the exposure level.
  if ! out=$("$analyze" security --offline=yes --threshold=20 "$unit" 2>&1); then
    echo "$unit: systemd-analyze security: $(grep -F 'Overall exposure' <<<"$out")"
    return 1
  fi
}

for unit in "$@"; do
  check "$unit"
  echo "verified: $unit"
  name=$(basename "$unit")
  # broken/1: a misspelled key, which verify only warns about ("Unknown key ..., ignoring").
  mkdir -p "$work/1" "$work/2" "$work/3"
  sed 's/^Type=notify$/Typ=notify/' "$unit" > "$work/1/$name"
  # broken/2: ExecStart naming a program that does not exist, which verify fails on.
  sed 's|^ExecStart=[^ ]*|ExecStart=/nonexistent/hf3fs-meta-program|' "$unit" > "$work/2/$name"
  # broken/3: no sandboxing (every line from DynamicUser= up to [Install] removed), which verify
  # accepts and security rates far above 2.0.
  sed '/^DynamicUser=/,/^\[Install\]/{/^\[Install\]/!d}' "$unit" > "$work/3/$name"
  for broken in "$work/1/$name" "$work/2/$name" "$work/3/$name"; do
    if cmp -s "$unit" "$broken"; then echo "$broken: the edit did not apply to $unit"; exit 1; fi
    if check "$broken" > "$work/broken.log"; then
      echo "$broken: a broken copy of $unit passed the check"; exit 1
    fi
    echo "rejected, as it must be: $broken ($(grep -F -- "$name" "$work/broken.log" | grep -v "verify exited" | head -1))"
  done
done
