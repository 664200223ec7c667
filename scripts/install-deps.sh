#!/usr/bin/env bash
# Installs the Debian 12 packages attngraph builds with, when any is missing.
# usage: scripts/install-deps.sh [extra-package...]   (scripts/fuzz.sh adds clang libclang-rt-14-dev)
set -euo pipefail
packages=(cmake ninja-build g++ ccache pkg-config
  libxtensor-dev xtl-dev libxsimd-dev libxtensor-blas-dev libopenblas-dev libtbb-dev
  libboost-dev libboost-test-dev nlohmann-json3-dev libcli11-dev libbenchmark-dev
  python3-numpy graphviz chromium libonnx-dev libprotobuf-dev
  pybind11-dev python3-dev python3-pytest python3-dask python3-distributed python3-matplotlib
  python3-torch "$@")  # python3-torch: tests/test_onnx_torch exports models with torch.onnx
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# ONNX Runtime for the export check (tests/node/ort_check.js): npm's onnxruntime-node, into
# tests/node/node_modules (the CPU binaries ship in the package; nothing else is downloaded)
if ! command -v npm >/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
ort_dir="$(dirname "$0")/../tests/node"
if [ ! -d "$ort_dir/node_modules/onnxruntime-node" ]; then
  echo "installing onnxruntime-node into tests/node"
  (cd "$ort_dir" && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error)
fi
