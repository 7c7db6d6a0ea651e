#!/usr/bin/env bash
# check_package.sh BUILD_DIR CONSUMER_SRC WORK_DIR [PYTHON PYTHON_INSTALL_DIR]
set -euo pipefail
build=$1 consumer=$2 work=$3 python=${4:-} python_dir=${5:-}
rm -rf "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work.install.log" 2>&1 || { cat "$work.install.log"; exit 1; }
for f in include/hf3fs_meta/client.hpp include/hf3fs_meta/stats.hpp include/hf3fs_meta/mocks/mock_connection.hpp include/hf3fs_meta/in_process_transport.hpp lib/libhf3fs_meta_service.so bin/hf3fs-meta bin/hf3fs-meta-server bin/hf3fs-meta-proxy lib/cmake/hf3fs_meta/hf3fs_meta-config.cmake lib/systemd/system/hf3fs-meta-server.service lib/systemd/system/hf3fs-meta-proxy.service; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
soname=$(objdump -p "$prefix"/lib/libhf3fs_meta_client.so | awk '/SONAME/ {print $2}')
[ "$soname" = "libhf3fs_meta_client.so.0.1" ] || { echo "unexpected SONAME '$soname'"; exit 1; }
cmake -S "$consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release
cmake --build "$work/consumer" --parallel
# The client-only program against the installed server, then the in-process one.
LD_LIBRARY_PATH="$prefix/lib" "$(dirname "$0")/../../scripts/with_server" "$prefix/bin/hf3fs-meta-server" \
  -- "$work/consumer/consumer"
LD_LIBRARY_PATH="$prefix/lib" "$work/consumer/consumer_in_process"
# hf3fs_meta::client, and the protocol library under it, link nothing of the state model.
for lib in client protocol; do
  if objdump -p "$prefix/lib/libhf3fs_meta_$lib.so" | grep -q 'NEEDED.*hf3fs_meta_\(state\|service\)'; then
    echo "libhf3fs_meta_$lib.so needs the state model"; exit 1
  fi
done
LD_LIBRARY_PATH="$prefix/lib" "$work/consumer/consumer_mock_test" > "$work.mock_test.log" || { cat "$work.mock_test.log"; exit 1; }
"$prefix/bin/hf3fs-meta" --help > /dev/null
"$prefix/bin/hf3fs-meta-proxy" --help > /dev/null  # the installed proxy finds the installed SDK
if [ -n "$python" ]; then
  case $python_dir in /*) ;; *) python_dir=$prefix/$python_dir ;; esac
  # No LD_LIBRARY_PATH: the installed module finds the installed libraries by its RPATH.
  PYTHONPATH="$python_dir" "$python" -c '
import sys, hf3fs_meta
assert hf3fs_meta.__file__.startswith(sys.argv[1]), hf3fs_meta.__file__
client = hf3fs_meta.LocalClient()
client.ensure_initialized(0, 4)
assert client.allocate(0, ["k"]) == [0]
print("package: the installed Python module imports and runs from", sys.argv[1])' "$python_dir"
fi
echo "package: installed tree builds and runs a consumer"
