#!/usr/bin/env bash
# Fresh machine -> the whole test suite: installs what is missing, builds (release), runs ctest.
# usage: scripts/test.sh [preset]   (release by default; debug, asan, tsan where defined)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/install-deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset" -j2
