#!/usr/bin/env bash
# Fresh machine -> the seed example: installs what is missing, builds (release), runs the
# seed graph printing every matrix of its trace, and writes the trace to ./seed-trace.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target attngraph_cli delivery_support
build/release/examples/delivery_support
build/release/attngraph run graphs/seed_mha.json --trace seed-trace --force >/dev/null
echo "trace of every node written to seed-trace/ (manifest.json + one .npy per name)"
