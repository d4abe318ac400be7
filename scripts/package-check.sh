#!/usr/bin/env bash
# Each packaging recipe end to end: build and install cohort the recipe's way into a fresh place, then
# build packaging/consumer against that installation and run its 2-rank allreduce under the installed
# cohortrun (packaging/consumer/run.sh). Prints PASS/FAIL and the seconds each took; logs in
# ~/.cache/cohort/package-check/<recipe>.log. Each builds cohort (minutes): not in CI, see docs/install.md.
#   deb        cpack -G DEB from a Release build of the tree (build-pkg/, incremental), then a Debian 12
#              made by debootstrap (cached, copied fresh each run), `apt-get install ./cohort*.deb`
#              resolving the rest from Debian's mirror, the consumer built and run inside the chroot:
#              only the packages are installed there, no file of the tree but packaging/consumer's.
#   conan      `conan create packaging/conan` from a copy of the tree's files (no build folder) with a
#              new CONAN_HOME; the test package runs the consumer. LibTorch is the host's (/usr).
#   easybuild  `eb` builds a tarball of the tree's files into a new prefix, then a login shell with only
#              Lmod's environment runs `module load cohort` and the consumer. LibTorch is the host's.
# conan and easybuild run under `env -i` (PATH=/usr/bin:/bin, no CMAKE_PREFIX_PATH, no LD_LIBRARY_PATH):
# nothing of a build tree is on a path; what they share with the host is /usr (LibTorch, cmake, g++).
# Usage: scripts/package-check.sh [deb|conan|easybuild|all]     (root: debootstrap, chroot, mounts)
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$PWD
cache=${COHORT_CACHE:-$HOME/.cache/cohort}
work=$cache/package-check
version=$(sed -n 's/^project(cohort VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[[ -n $version ]] || { echo "package-check: no project(cohort VERSION ...) in CMakeLists.txt"; exit 2; }
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${COHORT_DEBIAN_MIRROR:-${mirror:-http://deb.debian.org/debian}}
# ccache (cohort's CMake uses it when found) caches compiles that use the precompiled torch header only
# with this sloppiness: a rerun in the same folders (build-pkg/, eb's build path) then hits the cache.
export CCACHE_SLOPPINESS=pch_defines,time_macros
clean_env=(env -i HOME="$HOME" PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb
  CCACHE_SLOPPINESS="$CCACHE_SLOPPINESS")
need() { command -v "$1" >/dev/null || { echo "package-check: no $1 ($2)"; exit 2; }; }

# The tree's files, tracked and untracked but not ignored (no build folder), copied to $1.
copy_tree() {
  rm -rf "$1" && mkdir -p "$1"
  git -C "$tree" ls-files -z -co --exclude-standard | tar -C "$tree" --null -T - -cf - | tar -C "$1" -xf -
}

check_deb() {
  need debootstrap "apt-get install debootstrap"
  need dpkg-shlibdeps "apt-get install dpkg-dev"
  local build=${COHORT_DEB_BUILD_DIR:-$tree/build-pkg} base=$cache/deb/bookworm-base root=$work/deb-root
  [[ -f $build/build.ninja ]] || cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX=/usr -DCOHORT_BUILD_TESTS=OFF -DCOHORT_BUILD_EXAMPLES=OFF -DCOHORT_BUILD_BENCH=OFF
  nice -n 10 cmake --build "$build" --parallel "${COHORT_BUILD_JOBS:-2}"
  rm -f "$build"/cohort*.deb && (cd "$build" && cpack -G DEB)
  if [[ ! -f $base/.complete ]]; then  # Debian 12 as debootstrap makes it, once (about 3 minutes)
    rm -rf "$base" && debootstrap --variant=minbase bookworm "$base" "$mirror"
    chroot "$base" apt-get clean && touch "$base/.complete"
  fi
  rm -rf "$root" && cp -a "$base" "$root"
  cp /etc/resolv.conf /etc/hosts "$root/etc/"
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "$mirror" "$mirror" >"$root/etc/apt/sources.list"
  mkdir -p "$root/check" "$cache/deb/archives/partial"
  cp "$build"/cohort*_"$version"-*.deb "$root/check/"
  cp -r packaging/consumer "$root/check/consumer"
  # A private mount namespace: proc, dev, a new /dev/shm and apt's download cache are gone when it ends.
  unshare -m --propagation private bash -euo pipefail -c '
    root=$1
    mount -t proc proc "$root/proc"
    mount --bind /dev "$root/dev"
    mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
    mount --bind "$2" "$root/var/cache/apt/archives"
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
      chroot "$root" /bin/bash -euo pipefail -c "
        apt-get -o APT::Sandbox::User=root update -qq
        apt-get -o APT::Sandbox::User=root install -y -qq --no-install-recommends \
          /check/cohort_*.deb /check/cohort-dev_*.deb cmake g++ make >/check/apt.log 2>&1 ||
          { tail -30 /check/apt.log; echo apt-get install failed; exit 1; }
        dpkg-query -W cohort cohort-dev
        /check/consumer/run.sh /check/consumer-build"
  ' _ "$root" "$cache/deb/archives"
  ! mount | grep -q " $root/" || { echo "package-check: something is still mounted under $root"; exit 1; }
  [[ -n ${COHORT_KEEP_CHROOT:-} ]] || rm -rf "$root"
}

check_conan() {
  local venv=$cache/conan-venv home=$cache/conan-home src=$work/conan-src
  [[ -x $venv/bin/conan ]] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q conan; }
  copy_tree "$src"
  rm -rf "$home"
  local conan=("${clean_env[@]}" CONAN_HOME="$home" nice -n 10 "$venv/bin/conan")
  "${conan[@]}" profile detect >/dev/null
  "${conan[@]}" create "$src/packaging/conan" -c tools.build:jobs="${COHORT_BUILD_JOBS:-2}"
}

check_easybuild() {
  local venv=$cache/eb-venv prefix=$cache/eb src=$work/eb-src
  [[ -f /usr/share/lmod/lmod/init/bash ]] || { echo "package-check: no Lmod (apt-get install lmod)"; exit 2; }
  [[ -x $venv/bin/eb ]] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q easybuild; }
  copy_tree "$src/cohort-$version"
  mkdir -p "$src/sources" && tar -C "$src" -czf "$src/sources/cohort-$version.tar.gz" "cohort-$version"
  rm -rf "$prefix"
  local as_root=""  # eb refuses root unless told
  [[ $(id -u) -ne 0 ]] || as_root=--allow-use-as-root-and-accept-consequences
  "${clean_env[@]}" EB_PYTHON="$venv/bin/python" bash -lc "set -euo pipefail
    source /usr/share/lmod/lmod/init/bash
    nice -n 10 '$venv/bin/eb' '$tree/packaging/easybuild/cohort-$version.eb' --prefix='$prefix' \
      --sourcepath='$src/sources' --buildpath='$src/build' --parallel='${COHORT_BUILD_JOBS:-2}' \
      --trace --detect-loaded-modules=ignore $as_root
    ! command -v cohortrun >/dev/null || { echo 'cohortrun on PATH before module load'; exit 1; }
    module use '$prefix/modules/all'
    module load cohort
    echo \"module load cohort: CMAKE_PREFIX_PATH=\$CMAKE_PREFIX_PATH\"
    '$tree/packaging/consumer/run.sh' '$src/consumer-build'"
}

recipes=("${1:-all}")
[[ ${recipes[0]} == all ]] && recipes=(deb conan easybuild)
mkdir -p "$work"
failed=0
summary=()
for recipe in "${recipes[@]}"; do
  case $recipe in deb | conan | easybuild) ;; *) echo "usage: $0 [deb|conan|easybuild|all]"; exit 2 ;; esac
  log=$work/$recipe.log
  start=$SECONDS
  echo "package-check: $recipe (log: $log)"
  if (check_"$recipe") >"$log" 2>&1; then result=PASS; else result=FAIL; failed=1; tail -40 "$log"; fi
  summary+=("$result $recipe: $((SECONDS - start)) s")
  echo "${summary[-1]}"
done
echo "package-check: cohort $version, $(date -u +%Y-%m-%d)"
printf '  %s\n' "${summary[@]}"
exit $failed
