#!/usr/bin/env bash
# Installs the Debian 12 packages attngraph builds with, when any is missing.
# usage: scripts/install-deps.sh [extra-package...]   (scripts/fuzz.sh adds clang libclang-rt-14-dev)
set -euo pipefail
packages=(cmake ninja-build g++ ccache pkg-config
  libxtensor-dev xtl-dev libxsimd-dev libxtensor-blas-dev libopenblas-dev libtbb-dev
  libboost-dev libboost-test-dev nlohmann-json3-dev libcli11-dev libbenchmark-dev
  python3-numpy graphviz "$@")
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
