#!/usr/bin/env bash
# Fresh machine -> the whole test suite: installs what is missing, builds (release), runs ctest.
# usage: scripts/test.sh [preset]   (release by default; debug, asan, tsan where defined)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
extra=()
[ "$preset" = asan ] && extra=(clang libclang-rt-14-dev)  # the asan preset builds with clang
scripts/install-deps.sh "${extra[@]}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset" -j2
