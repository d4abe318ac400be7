#!/usr/bin/env bash
# Offload's speed against the disk (issue 40): the GPT step at stage 3 without offload, with the
# optimizer on NVMe, and with optimizer and parameters on NVMe, interleaved ROUNDS times; fio's
# sequential direct-I/O bandwidth of the same directory (1 MiB blocks, queue depth 8, as aio's
# defaults); and for each offloaded mode the bound the issue sets: the step without offload plus the
# bytes the swap files moved in a step (gpt_step's io_mib_per_step_sum, all ranks) over the disk's
# bandwidth (read and write each at its own rate, here taken as the slower of the two). Prints one
# RESULT line per run, then medians and each mode's step / bound.
# Usage: bench/gpt/offload.sh [NVME_DIR]   (env: BUILD, RANKS, ROUNDS, LAYERS, EMBD, BATCH, STEPS)
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
nvme=${1:-/tmp/cohort-offload-bench}
build=${BUILD:-build}
ranks=${RANKS:-2} rounds=${ROUNDS:-3} layers=${LAYERS:-6} embd=${EMBD:-384} batch=${BATCH:-4} steps=${STEPS:-3}
mkdir -p "$nvme"
command -v fio >/dev/null || { echo "offload.sh: fio is missing (apt-get install fio)" >&2; exit 2; }

fio_mib() {  # $1 = read | write: MiB/s
  fio --name="cohort-$1" --directory="$nvme" --rw="$1" --bs=1M --size=1G --direct=1 --ioengine=io_uring \
      --iodepth=8 --output-format=terse --terse-version=3 2>/dev/null |
    awk -F';' -v rw="$1" '{ print (rw == "read" ? $7 : $48) / 1024 }'
  rm -f "$nvme"/cohort-"$1"*
}
read_mib=$(fio_mib read)
write_mib=$(fio_mib write)
echo "fio $nvme: read ${read_mib} MiB/s, write ${write_mib} MiB/s (1 MiB blocks, queue depth 8, O_DIRECT)"

run() {  # mode flags...
  "$build/tools/cohortrun" --standalone --nproc-per-node "$ranks" "$build/bench/gpt/gpt_step" --mode zero3 \
    --n-layer "$layers" --n-embd "$embd" --n-head 6 --block-size 128 --batch-size "$batch" --steps "$steps" --warmup 1 \
    --nvme-path "$nvme" "$@" 2>/dev/null | sed 's/^\[rank0\]: //' | grep '^RESULT'
}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in $(seq "$rounds"); do
  for mode in none optimizer both; do
    case $mode in
      none) flags=() ;;
      optimizer) flags=(--offload-optimizer nvme) ;;
      both) flags=(--offload-optimizer nvme --offload-params nvme) ;;
    esac
    line=$(run "${flags[@]}")
    echo "round $round $mode: $line"
    echo "$mode $line" >>"$results"
  done
done
python3 - "$results" "$read_mib" "$write_mib" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    mode, rest = line.split(' ', 1)
    fields = dict(re.findall(r'(\w+)=([^ ]+)', rest))
    runs.setdefault(mode, []).append((float(fields['step_s']), float(fields['io_mib_per_step_sum']),
                                      float(fields['peak_max_mib'])))
bandwidth = min(float(sys.argv[2]), float(sys.argv[3]))
base = statistics.median(r[0] for r in runs['none'])
print(f"median step without offload: {base:.3f} s (peak RSS per rank {statistics.median(r[2] for r in runs['none']):.0f} MiB)")
for mode in ('optimizer', 'both'):
    step = statistics.median(r[0] for r in runs[mode])
    io = statistics.median(r[1] for r in runs[mode])
    bound = base + io / bandwidth
    peak = statistics.median(r[2] for r in runs[mode])
    print(f"OFFLOAD {mode}: step {step:.3f} s, {io:.0f} MiB moved per step, bound {bound:.3f} s "
          f"(= {base:.3f} + {io:.0f} / {bandwidth:.0f}), step / bound {step / bound:.2f}, peak RSS per rank {peak:.0f} MiB")
EOF
