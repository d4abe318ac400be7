#!/usr/bin/env bash
# Packs the build dependencies cohort takes from Debian (gloo, nlohmann-json, CLI11, GoogleTest,
# zlib and OpenSSL headers and libraries) into one prefix folder, for a GPU node that has a compiler,
# CMake and PyTorch but no package manager or network (air-gapped clusters, lent test machines).
# Usage: scripts/pack-build-deps.sh DIR ; then on that node: COHORT_DEPS_PREFIX=DIR scripts/test-gpu.sh
set -euo pipefail
dir="${1:?usage: scripts/pack-build-deps.sh DIR}"
multiarch=x86_64-linux-gnu
mkdir -p "$dir/include" "$dir/lib/$multiarch/cmake" "$dir/share/cmake"
for header in gloo nlohmann CLI gtest gmock openssl zlib.h zconf.h; do
  cp -a "/usr/include/$header" "$dir/include/"
done
cp -a /usr/include/$multiarch/openssl/. "$dir/include/openssl/"
cp -a /usr/lib/$multiarch/lib{gtest,gtest_main,gmock,gmock_main}.a "$dir/lib/$multiarch/"
cp -a /usr/lib/$multiarch/cmake/GTest "$dir/lib/$multiarch/cmake/"
cp -L /usr/lib/$multiarch/libcrypto.so.3 "$dir/lib/$multiarch/libcrypto.so"
cp -L /usr/lib/$multiarch/libz.so.1 "$dir/lib/$multiarch/libz.so"
cp -a /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$dir/share/cmake/"
# the example's data (dataset-fashion-mnist), for scripts/test-gpu.sh's example test
[ -d /usr/share/datasets/fashion-mnist ] && cp -a /usr/share/datasets/fashion-mnist "$dir/"
echo "pack-build-deps: $(du -sh "$dir" | cut -f1) in $dir"
