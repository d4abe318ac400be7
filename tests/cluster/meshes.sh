# Scenario meshes (issue 41, docs/parallelism.md): examples/gpt on 8 ranks over 2 hosts x 4, started
# with cohortrun on each host, on three meshes of the same 4 or 8 data-parallel ranks and the same
# global batch of 16 sequences: (a) tensor parallel 2 x flat fsdp over 4 ranks that span both hosts,
# (b) fsdp by default, which shards within a host and replicates across (HSDP 2 x 4), (c) tensor
# parallel 2 x that HSDP (2 replicas x 2 shards x 2), (d) 2 pipeline stages (one per host) x fsdp 2 x
# tensor parallel 2, (e) (a)'s checkpoint at step 10 resumed on (d)'s mesh. Each exports its whole model
# (--export), which must be within 1e-5 (max abs) of one process's after 20 AdamW steps (fp32, no
# dropout, no biases); under bf16 (b, c and d again) the losses at steps 10 and 20 are within 1% of one
# process's in fp32.

scenario_hosts() { echo 2; }

MESH_GPT_FLAGS=(--n-layer 2 --n-head 4 --n-embd 32 --block-size 16 --max-steps 20 --eval-interval 10
                --eval-iters 1 --sample-tokens 0 --no-bias --threads 1)

# Every line of the tiny text the runs read: the same bytes for every mesh.
mesh_text() {
  local i
  for ((i = 0; i < 300; i++)); do echo "Ranks over hosts, line $i: shard within, replicate across."; done >"$1"
}

# One mesh: cohortrun on n1 and n2 (4 workers each, the c10d rendezvous at n1) with the same flags on
# both (the export is a collective; rank 0, wherever it runs, writes NAME.safetensors).
mesh_run() {
  local out=$1 name=$2 start rc1 rc2 p2; shift 2
  start=$(now)
  export NNODES=2 MASTER_ADDR=n1 RDZV_ID="meshes-$name-$$" WORKERS_PER_NODE=4 TRAIN="$BUILD/examples/gpt" \
    COHORTRUN="$BUILD/tools/cohortrun"
  run_on n2 300 "$out/$name.n2.log" "$here/jobs/cohortrun_node.sh" "$@" --export "$out/$name.safetensors" &
  p2=$!
  run_on n1 300 "$out/$name.n1.log" "$here/jobs/cohortrun_node.sh" "$@" --export "$out/$name.safetensors"
  rc1=$?
  wait "$p2"; rc2=$?
  unset NNODES MASTER_ADDR RDZV_ID WORKERS_PER_NODE TRAIN COHORTRUN
  cl_log "timing: $name $(elapsed "$start") s"
  if [ "$rc1$rc2" != 00 ]; then
    fail "$name exited with $rc1 on n1 and $rc2 on n2; n1's output ends:"; tail -n 15 "$out/$name.n1.log" >&2
    return 1
  fi
  local hosts
  hosts=$(joined_hosts "$out/$name.n1.log" 8 "cohortrun/torchrun")
  [ "$hosts" = "10.77.0.1" ] || fail "$name: n1's ranks joined from '$hosts', not 10.77.0.1"
}

# The export of a mesh against one process's, within 1e-5.
mesh_check() {
  local out=$1 name=$2 line
  if ! line=$("${COHORT_PYTHON:-/usr/bin/python3}" "$here/../python/gpt_interop.py" compare "$out/one.safetensors" "$out/$name.safetensors" 1e-5); then
    fail "$name ends away from one process: $line"
    return
  fi
  cl_log "$name against one process: $line"
}

# "step N: train loss X, val loss Y" of a run's log, as "X Y".
losses_at() { sed -n "s/^.*step $2: train loss \([0-9.]*\), val loss \([0-9.]*\).*$/\1 \2/p" "$1" | head -n1; }

# A bf16 mesh's losses at steps 10 and 20 within 1% of one process's in fp32.
mesh_bf16_check() {
  local out=$1 name=$2 step want got
  for step in 10 20; do
    want=$(losses_at "$out/one.log" "$step") got=$(losses_at "$out/$name.n1.log" "$step")
    if [ -z "$got" ] || ! awk -v w="$want" -v g="$got" 'BEGIN { split(w, a); split(g, b)
         exit !(a[1] > 0 && a[2] > 0 && (b[1] - a[1]) / a[1] < 0.01 && (a[1] - b[1]) / a[1] < 0.01 &&
                (b[2] - a[2]) / a[2] < 0.01 && (a[2] - b[2]) / a[2] < 0.01) }'; then
      fail "$name: losses at step $step are '$got', not within 1% of one process's fp32 '$want'"
    else
      cl_log "$name at step $step: losses $got against one process's fp32 $want"
    fi
  done
}

scenario_meshes() {
  local out="$CL_DIR/meshes" text start
  mkdir -p "$out"
  text="$out/text.txt"
  mesh_text "$text"
  local flags=("${MESH_GPT_FLAGS[@]}" --data "$text" --strategy fsdp)
  start=$(now)
  run_on n1 300 "$out/one.log" "$BUILD/examples/gpt" "${flags[@]}" --devices 1 --batch-size 16 --export "$out/one.safetensors" ||
    { fail "one process exited with status $?:"; tail -n 15 "$out/one.log" >&2; return 1; }
  cl_log "timing: one process $(elapsed "$start") s"

  if mesh_run "$out" tp2_fsdp4 "${flags[@]}" --tp 2 --dp-replicate 1 --batch-size 4 --checkpoint-dir "$out/ckpt" \
    --checkpoint-every 10; then
    grep -q "fsdp on 8 rank(s) (4 data parallel x 2 tensor parallel)" "$out/tp2_fsdp4.n1.log" ||
      fail "tp2_fsdp4: no '4 data parallel x 2 tensor parallel' header"
    mesh_check "$out" tp2_fsdp4
  fi
  # fsdp by default on 2 hosts of 4 ranks: a host's ranks shard, the hosts replicate (cohort-plan's --ranks 4).
  if mesh_run "$out" hsdp2x4 "${flags[@]}" --batch-size 2; then
    grep -q -- "--ranks 4 --stage 3" "$out/hsdp2x4.n1.log" || fail "hsdp2x4: the plan line does not shard over 4 ranks"
    mesh_check "$out" hsdp2x4
  fi
  if mesh_run "$out" tp2_hsdp2x2 "${flags[@]}" --tp 2 --batch-size 4; then
    grep -q -- "--ranks 2 --stage 3" "$out/tp2_hsdp2x2.n1.log" ||
      fail "tp2_hsdp2x2: the plan line does not shard over 2 ranks"
    mesh_check "$out" tp2_hsdp2x2
  fi
  # The stages outermost (torchtitan's order): stage 0 on n1, stage 1 on n2, FSDP and TP inside a host.
  if mesh_run "$out" pp2_fsdp2_tp2 "${flags[@]}" --pp 2 --tp 2 --batch-size 8; then
    grep -q "fsdp on 8 rank(s) (2 pipeline stages x 2 data parallel x 2 tensor parallel)" "$out/pp2_fsdp2_tp2.n1.log" ||
      fail "pp2_fsdp2_tp2: no '2 pipeline stages x 2 data parallel x 2 tensor parallel' header"
    mesh_check "$out" pp2_fsdp2_tp2
  fi
  if mesh_run "$out" tp2_fsdp4_to_pp2 "${flags[@]}" --pp 2 --tp 2 --batch-size 8 --resume "$out/ckpt/step-10"; then
    grep -q "resumed from $out/ckpt/step-10" "$out/tp2_fsdp4_to_pp2.n1.log" || fail "tp2_fsdp4_to_pp2: not resumed"
    mesh_check "$out" tp2_fsdp4_to_pp2
  fi
  # bf16 (bf16 parameters and gradients, fp32 masters) on two of the meshes: the loss curve of fp32's.
  mesh_run "$out" hsdp2x4_bf16 "${flags[@]}" --batch-size 2 --precision bf16-mixed && mesh_bf16_check "$out" hsdp2x4_bf16
  mesh_run "$out" tp2_hsdp2x2_bf16 "${flags[@]}" --tp 2 --batch-size 4 --precision bf16-mixed &&
    mesh_bf16_check "$out" tp2_hsdp2x2_bf16
  mesh_run "$out" pp2_fsdp2_tp2_bf16 "${flags[@]}" --pp 2 --tp 2 --batch-size 8 --precision bf16-mixed &&
    mesh_bf16_check "$out" pp2_fsdp2_tp2_bf16
  [ "$FAILURES" = 0 ]
}
