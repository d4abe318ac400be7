#!/usr/bin/env bash
# Every offload combination of examples/gpt against the same run without offload (issue 40): for 1, 2
# and 4 ranks, AdamW and SGD with momentum, zero1 and zero2 with --offload-optimizer cpu and nvme,
# zero3 with --offload-optimizer none/cpu/nvme x --offload-params none/cpu/nvme, each run's
# params-sha256 after STEPS steps against the run without offload (fp32 on the CPU: equal bits are
# expected, the host step being LibTorch's arithmetic over the same flat shards). Then, at RESUME_RANKS
# ranks, each offloaded combination is stopped at STEPS/2 with a checkpoint and resumed to STEPS: its
# digest against the uninterrupted run's. One line per run, then the counts; exit status 1 on any
# difference. Usage: bench/gpt/offload_matrix.sh [WORK_DIR]
#   env: BUILD (build), RANKS ("1 2 4"), STEPS (20), RESUME_RANKS (2), OPTIMIZERS ("adamw sgd")
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
work=${1:-$(mktemp -d /tmp/cohort-offload-matrix.XXXXXX)}
ranks_list=${RANKS:-"1 2 4"} steps=${STEPS:-20} resume_ranks=${RESUME_RANKS:-2} optimizers=${OPTIMIZERS:-"adamw sgd"}
mkdir -p "$work/nvme"
gpt=("$build/examples/gpt" --n-layer 3 --n-embd 32 --n-head 2 --block-size 16 --batch-size 4 --eval-interval "$steps"
     --eval-iters 1 --sample-tokens 0 --threads 1 --lr 1e-2)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
differ=0 equal=0

digest() {  # ranks optimizer strategy opt params [more flags]: the run's params-sha256
  local ranks=$1 optimizer=$2 strategy=$3 opt=$4 params=$5
  shift 5
  local flags=(--devices "$ranks" --optimizer "$optimizer" --strategy "$strategy" --offload-optimizer "$opt"
               --offload-params "$params")
  [ "$opt" = nvme ] || [ "$params" = nvme ] && flags+=(--nvme-path "$work/nvme")
  local out
  if ! out=$("${gpt[@]}" "${flags[@]}" "$@" 2>&1); then
    echo "FAILED: ${flags[*]} $*" >&2
    echo "$out" | tail -5 >&2
    echo failed
    return
  fi
  echo "$out" | sed -n 's/.*params-sha256: //p' | tail -1
}

compare() {  # label want got
  if [ "$2" = "$3" ] && [ "$2" != failed ]; then
    equal=$((equal + 1)); echo "EQUAL  $1"
  else
    differ=$((differ + 1)); echo "DIFFER $1 (${3:0:16} against ${2:0:16})"
  fi
}

combinations() {  # strategy: the offload pairs that apply to it ("optimizer params")
  case $1 in
    zero3) for o in none cpu nvme; do for p in none cpu nvme; do [ "$o$p" = nonenone ] || echo "$o $p"; done; done ;;
    *) echo "cpu none"; echo "nvme none" ;;
  esac
}

for ranks in $ranks_list; do
  for optimizer in $optimizers; do
    for strategy in zero1 zero2 zero3; do
      want=$(digest "$ranks" "$optimizer" "$strategy" none none --max-steps "$steps")
      while read -r opt params; do
        got=$(digest "$ranks" "$optimizer" "$strategy" "$opt" "$params" --max-steps "$steps")
        compare "ranks=$ranks $optimizer $strategy optimizer=$opt params=$params" "$want" "$got"
        if [ "$ranks" = "$resume_ranks" ]; then
          ckpt="$work/ckpt-$ranks-$optimizer-$strategy-$opt-$params"
          digest "$ranks" "$optimizer" "$strategy" "$opt" "$params" --max-steps $((steps / 2)) \
            --checkpoint-dir "$ckpt" --checkpoint-every $((steps / 2)) >/dev/null
          got=$(digest "$ranks" "$optimizer" "$strategy" "$opt" "$params" --max-steps "$steps" --checkpoint-dir "$ckpt" \
            --checkpoint-every "$steps")
          compare "ranks=$ranks $optimizer $strategy optimizer=$opt params=$params resumed at $((steps / 2))" "$want" "$got"
        fi
      done < <(combinations "$strategy")
    done
  done
done
left=$(ls -A "$work/nvme")
echo "offload_matrix: $equal equal, $differ different; swap files left in $work/nvme: ${left:-none}"
[ "$differ" = 0 ] && [ -z "$left" ]
