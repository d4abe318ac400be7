#!/usr/bin/env bash
# Layering you can see: each layer of src/ compiles against an include root (build/layers/<layer>) that
# holds only its own and the lower layers' folders. This checks the whole matrix with __has_include and
# that a real wrong-direction include (comm including a DDP header) stops the compiler with a clear line.
# Usage: layering_test.sh <build dir> <source dir> <c++ compiler>
set -euo pipefail
build=$1 src=$2 cxx=$3
order=(compat core comm world data ddp zero checkpoint pipeline horovod trainer)
# What each layer may see: everything below it; ddp and zero are peers; checkpoint sees both.
sees() {
  case $1 in
    compat) echo compat ;;
    core) echo compat core ;;
    comm) echo compat core comm ;;
    world) echo compat core comm world ;;
    data) echo compat core comm world data ;;
    ddp) echo compat core comm world data ddp ;;
    zero) echo compat core comm world data zero ;;
    checkpoint) echo compat core comm world data ddp zero checkpoint ;;
    pipeline) echo compat core comm world data ddp zero checkpoint pipeline ;;
    horovod) echo compat core comm world data horovod ;;
    trainer) echo "${order[*]}" ;;
  esac
}
# Layers not written yet (no folder in src/) are left out.
present=()
for layer in "${order[@]}"; do [[ -d $src/src/$layer ]] && present+=("$layer"); done
order=("${present[@]}")
failures=0
for layer in "${order[@]}"; do
  root=$build/layers/$layer
  [[ -d $root ]] || { echo "FAIL: no include root $root"; exit 1; }
  visible=" $(sees "$layer") "
  for other in "${order[@]}"; do
    header=$(cd "$src/src/$other" && ls | head -1)
    if [[ $visible == *" $other "* ]]; then want=1; else want=0; fi
    got=$(printf '#if __has_include("%s/%s")\nint seen = 1;\n#else\nint seen = 0;\n#endif\n' "$other" "$header" |
      "$cxx" -E -P -I"$root" -x c++ - | grep -o 'seen = [01]' | tr -dc 01)
    if [[ $got != "$want" ]]; then
      echo "FAIL: layer $layer sees $other/$header: $got (expected $want)"
      failures=$((failures + 1))
    fi
  done
done
# A lower layer including a higher one's header fails to build, naming the header.
out=$(printf '#include "ddp/reducer.h"\n' | "$cxx" -fsyntax-only -I"$build/layers/comm" -x c++ - 2>&1 || true)
if [[ $out != *"ddp/reducer.h: No such file or directory"* ]]; then
  echo "FAIL: comm including ddp/reducer.h was not refused; the compiler said: $out"
  failures=$((failures + 1))
fi
[[ $failures == 0 ]] && echo "layering: ${#order[@]} layers, each sees exactly the layers below it"
exit $((failures > 0))
