#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what gpuprov builds and tests with on Debian/Ubuntu (skips what is already there).
set -euo pipefail
pkgs=(gcc pkg-config meson ninja-build openssl libssl-dev libcmocka-dev libsodium-dev python3 git ca-certificates
      nginx curl wrk         # nginx, curl: the tls suite (tests/tls); wrk: bench/tax (Debian 12's nginx-light no longer holds the binary)
      clang)                 # clang: the fuzz target (tests/fuzz), libFuzzer is part of it
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# libFuzzer's runtime is only recommended by Debian's and Ubuntu's clang: install it where missing.
if ! [ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; then
  rt="libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing $rt (libFuzzer)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$rt"
fi
if command -v nvcc >/dev/null 2>&1; then
  echo "install-deps: nvcc found ($(nvcc --version | tail -1)): the CUDA kernels will be built"
else
  echo "install-deps: no nvcc: the module builds without the CUDA kernels (install the CUDA toolkit for them)"
fi
