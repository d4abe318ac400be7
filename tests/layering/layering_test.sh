#!/usr/bin/env bash
# Layering you can see: each layer of src/ compiles against an include root (build/layers/<layer>) that
# holds only its own folder and those of the layers it sees. The layers, what each sees and which layer
# owns each public header are written once, in src/layers.txt; this checks against it: the include
# roots (with __has_include), that a real wrong-direction include (comm including a DDP header) stops
# the compiler with a clear line, the public headers (included only where their owner is seen), and
# that docs/design/architecture.md states the same order.
# Usage: layering_test.sh <build dir> <source dir> <c++ compiler>
set -euo pipefail
build=$1 src=$2 cxx=$3
table=$src/src/layers.txt
order=($(awk '$1 == "layer" { print $2 }' "$table"))
# What a layer sees: itself and the layers its line lists.
sees() { awk -v l="$1" '$1 == "layer" && $2 == l { $1 = ""; print }' "$table"; }
# The layer that owns public header $1 (a file name in include/cohort), "" when none.
owner() { awk -v h="$1" '$1 == "header" { for (i = 3; i <= NF; ++i) if ($i == h) print $2 }' "$table"; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Layers not written yet (no folder in src/) are left out.
present=()
for layer in "${order[@]}"; do [[ -d $src/src/$layer ]] && present+=("$layer"); done
for layer in "${present[@]}"; do
  root=$build/layers/$layer
  [[ -d $root ]] || { echo "FAIL: no include root $root"; exit 1; }
  visible=" $(sees "$layer") "
  for other in "${present[@]}"; do
    header=$(cd "$src/src/$other" && ls | head -1)
    if [[ $visible == *" $other "* ]]; then want=1; else want=0; fi
    got=$(printf '#if __has_include("%s/%s")\nint seen = 1;\n#else\nint seen = 0;\n#endif\n' "$other" "$header" |
      "$cxx" -E -P -I"$root" -x c++ - | grep -o 'seen = [01]' | tr -dc 01)
    [[ $got == "$want" ]] || fail "layer $layer sees $other/$header: $got (expected $want)"
  done
done
# A lower layer including a higher one's header fails to build, naming the header.
out=$(printf '#include "ddp/reducer.h"\n' | "$cxx" -fsyntax-only -I"$build/layers/comm" -x c++ - 2>&1 || true)
if [[ $out != *"ddp/reducer.h: No such file or directory"* ]]; then
  fail "comm including ddp/reducer.h was not refused; the compiler said: $out"
fi

# Public headers: each listed once; included only by code whose layer sees the owner.
for path in "$src"/include/cohort/*.h; do
  name=$(basename "$path")
  owners=$(owner "$name" | wc -l)
  [[ $owners == 1 ]] || fail "include/cohort/$name is owned by $owners layers in src/layers.txt (expected 1)"
done
# check_includes <who> <layer that sees> <files...>: every "cohort/X.h" they include is owned by a seen layer.
check_includes() {
  local who=$1 layer=$2
  shift 2
  local visible=" $(sees "$layer") "
  local file included owned
  for file in "$@"; do
    for included in $(grep -ohE '^#include ["<]cohort/[a-z_]+\.h[">]' "$file" | sed -E 's|.*cohort/||; s|[">]$||'); do
      owned=$(owner "$included")
      [[ $visible == *" $owned "* ]] ||
        fail "$who ${file#$src/} includes cohort/$included, owned by ${owned:-no layer}, which $layer does not see"
    done
  done
}
for path in "$src"/include/cohort/*.h; do
  name=$(basename "$path")
  layer=$(owner "$name")
  [[ -n $layer ]] && check_includes "public header (layer $layer)" "$layer" "$path"
done
for layer in "${present[@]}"; do
  mapfile -t files < <(find "$src/src/$layer" -name '*.h' -o -name '*.cpp')
  check_includes "layer $layer:" "$layer" "${files[@]}"
done

# The architecture document states the same order.
line="Layers, lowest first: \`${order[*]}\`."
grep -qF "$line" "$src/docs/design/architecture.md" ||
  fail "docs/design/architecture.md does not say: $line"

[[ $failures == 0 ]] &&
  echo "layering: ${#present[@]} layers, each sees exactly the layers src/layers.txt gives it; public headers by owner"
exit $((failures > 0))
