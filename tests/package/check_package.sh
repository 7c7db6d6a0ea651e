#!/usr/bin/env bash
# check_package.sh BUILD_DIR CONSUMER_SRC WORK_DIR
set -euo pipefail
build=$1 consumer=$2 work=$3
rm -rf "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work.install.log" 2>&1 || { cat "$work.install.log"; exit 1; }
for f in include/hf3fs_meta/client.hpp bin/hf3fs-meta bin/hf3fs-meta-server lib/cmake/hf3fs_meta/hf3fs_meta-config.cmake; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
soname=$(objdump -p "$prefix"/lib/libhf3fs_meta_client.so | awk '/SONAME/ {print $2}')
[ "$soname" = "libhf3fs_meta_client.so.0.1" ] || { echo "unexpected SONAME '$soname'"; exit 1; }
cmake -S "$consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release
cmake --build "$work/consumer"
LD_LIBRARY_PATH="$prefix/lib" "$work/consumer/consumer"
"$prefix/bin/hf3fs-meta" --help > /dev/null
echo "package: installed tree builds and runs a consumer"
