#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job (README): install what is missing, build gpuprov, then run bench/compare, the
# `openssl speed` comparison with the default provider. On a host with an NVIDIA GPU: the full
# matrix (3 ciphers x 16 B-16 MiB x -async_jobs 0,32, -multi 1; the default provider, gpuprov's
# default configuration and forced GPU in every cell, 3 repeats: ~15 minutes), written to
# bench/plots/ and bench/RESULTS.md. Without a GPU it says so and runs a reduced comparison of what
# exists (default vs gpuprov as passthrough) into build/compare/, leaving the committed GPU
# figures alone. Extra arguments go to bench/compare (e.g. --quick: ~2 minutes; --multi 1,16;
# --openssl PREFIX: every run under the OpenSSL installed there, with --build DIR for a gpuprov built
# against that line's headers, as `build` is against the system's); COMPARE_ARGS replaces the matrix.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tests/install-deps.sh
meson setup build --reconfigure >/dev/null 2>&1 || meson setup build
ninja -C build

# Plots need matplotlib: wheels carried in .whl/ (see bench/compare --help), else the distribution's
# package; without either, bench/compare still writes CSV and RESULTS and says how to plot later.
if ! python3 -c 'import matplotlib' 2>/dev/null; then
  if compgen -G "$root/.whl/*.whl" >/dev/null; then
    echo "main-job: installing matplotlib from .whl/ into /tmp/gpuprov-site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target /tmp/gpuprov-site "$root"/.whl/*.whl || echo "main-job: wheel install failed"
    export PYTHONPATH=/tmp/gpuprov-site${PYTHONPATH:+:$PYTHONPATH}
  elif command -v apt-get >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive timeout 300 $sudo apt-get install -y -qq --no-install-recommends \
      python3-matplotlib >/dev/null 2>&1 || echo "main-job: python3-matplotlib not installable: plots skipped"
  fi
fi

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "main-job: GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1): full matrix"
  read -r -a matrix <<<"${COMPARE_ARGS:-}"
else
  echo "main-job: no GPU on this host (nvidia-smi finds none): comparing the default provider with"
  echo "main-job: gpuprov as passthrough (its names, the default's functions); one repeat, output in build/compare/"
  read -r -a matrix <<<"${COMPARE_ARGS:---repeat 1 --out build/compare --results build/compare/RESULTS.md}"
fi
exec bench/compare --build build "${matrix[@]}" "$@"
