#!/usr/bin/env bash
# The Fashion-MNIST example as a lone process on a GPU machine: it must pick cuda:0 by itself, train
# 300 steps and end with its params-sha256. Without a visible GPU it says so and passes.
set -uo pipefail
example="$1"; data="$2"
# One step first: on a machine without a GPU that says "on cpu," and the test ends in seconds.
probe="$("$example" --data "$data" --max-steps 1 2>&1)"; code=$?
if grep -q " on cpu," <<<"$probe" && [ $code -eq 0 ]; then echo "skipped: no CUDA device visible"; exit 0; fi
output="$("$example" --data "$data" --max-steps 300 2>&1)"; code=$?
if ! grep -q " on cuda:0," <<<"$output"; then
  if grep -q " on cpu," <<<"$output" && [ $code -eq 0 ]; then echo "skipped: no CUDA device visible"; exit 0; fi
  echo "$output"; echo "FAILED: the example did not run on cuda:0 (exit $code)"; exit 1
fi
echo "$output" | tail -4
[ $code -eq 0 ] && grep -q "params-sha256: " <<<"$output" || { echo "FAILED: exit $code"; exit 1; }
