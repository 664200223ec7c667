#!/bin/sh
# Installs the build tree $1 into a prefix, then configures, builds and runs the program of
# tests/install against it (find_package(attngraph)), with the compiler $2 and flags $3, $4.
# The prefix and the program's build stay under $1/install-check (fixed paths: ccache hits).
set -eu
build=$1 compiler=$2 cxx_flags=$3 link_flags=$4
here=$(cd "$(dirname "$0")" && pwd)
work=$build/install-check
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
launcher=$(command -v ccache || true)
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_EXE_LINKER_FLAGS="$link_flags" \
    ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} >/dev/null
cmake --build "$work/build"
"$work/build/expr_consumer"
