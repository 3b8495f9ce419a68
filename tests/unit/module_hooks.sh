#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The production gpuprov.so holds no GPUPROV_TEST_* name (and no experiment switch's unless built
# with them); the test module holds every one (batching/settings.c).
# usage: module_hooks.sh PRODUCTION_SO TEST_SO EXPERIMENTS(0|1)
set -u
prod=$1 testmod=$2 experiments=$3
status=0
hooks="GPUPROV_TEST_CUDA_FAULT_AFTER GPUPROV_TEST_CUDA_SILENT_AFTER GPUPROV_TEST_GHASH_MMA_ANY_BATCH
GPUPROV_TEST_NO_EARLY_LAUNCH GPUPROV_TEST_STAGE_ONE_THREAD GPUPROV_TEST_UNWATCH_DELAY_US
GPUPROV_TEST_HOST_INFLIGHT GPUPROV_TEST_HOST_STAGE GPUPROV_TEST_SLICE_BYTES GPUPROV_TEST_HOST_DEVMEM GPUPROV_TEST_CPUS_FREE
GPUPROV_TEST_ORDERED_ALONE
GPUPROV_TEST_HOST_FAIL_AFTER GPUPROV_TEST_CUDA_FAULT_CALL GPUPROV_TEST_CUDA_FAULT_FILE GPUPROV_TEST_CUDA_FAULT_LINE
GPUPROV_TEST_CUDA_FAULT_SKIP GPUPROV_TEST_CUDA_FAULT_TIMES GPUPROV_TEST_CUDA_FAULT_DEVICE GPUPROV_TEST_CUDA_FAULT_AT_MS"
switches="GPUPROV_LONE_LAUNCH GPUPROV_SMALL_REFS GPUPROV_SPREAD"
has() { grep -a -q "$2" "$1"; }
for f in "$prod" "$testmod"; do
    [ -f "$f" ] || { echo "FAIL: $f does not exist"; exit 1; }
done
if has "$prod" GPUPROV_TEST_; then
    echo "FAIL: the production module names a test hook:"; grep -a -o 'GPUPROV_TEST_[A-Z_]*' "$prod" | sort -u
    status=1
fi
for v in $hooks $switches; do
    has "$testmod" "$v" || { echo "FAIL: the test module lacks $v"; status=1; }
done
for v in $switches; do
    if has "$prod" "$v" && [ "$experiments" = 0 ]; then
        echo "FAIL: the production module names the experiment switch $v without -Dexperiments=true"; status=1
    elif ! has "$prod" "$v" && [ "$experiments" = 1 ]; then
        echo "FAIL: -Dexperiments=true, but the production module lacks $v"; status=1
    fi
done
has "$prod" GPUPROV_BACKEND || { echo "FAIL: the production module lacks GPUPROV_BACKEND (is this the module?)"; status=1; }
[ $status = 0 ] && echo "ok: production module without test hooks (experiments: $experiments), test module with them"
exit $status
