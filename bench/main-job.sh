#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: install what is missing, build gpuprov, then compare it with the default provider
# through `openssl speed` (README). Without a GPU it says so and compares the executors it has.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tests/install-deps.sh
meson setup build --reconfigure >/dev/null 2>&1 || meson setup build
ninja -C build
bash bench/speed.sh build "${SPEED_SECONDS:-1}"
