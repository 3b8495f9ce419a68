#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The first run on a fresh host: the README's large-message speed command, with an empty calibration
# cache, sends a lone caller's 16 MiB ChaCha20-Poly1305 message to the GPU where the host is of a
# class the priors cover (batching/policy/priors.c). The host executor stands in for the GPU, and a
# test hook names its model (GPUPROV_TEST_GPU_MODEL), as the hybrid tests do. Then: a host no class
# covers keeps that message on the CPU until it has measured, and gpuprov-calibrate's measurement
# replaces the priors.
#
# Environment (tests/integration/meson.build): OPENSSL, GPTEST_SOURCE_ROOT, GPTEST_MODULE_DIR (the
# test module), GPTEST_CALIBRATE (the gpuprov-calibrate binary).
set -u
OPENSSL=${OPENSSL:-openssl}
SRC=${GPTEST_SOURCE_ROOT:?}
README=$SRC/README.md
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
failures=0
fail() { echo "FAIL: $1"; [ -n "${2:-}" ] && sed 's/^/    /' "$2"; failures=$((failures + 1)); }

# The README's command, as written (one line, in a block the readme test runs too).
cmd=$(grep -E '^GPUPROV_STATS=1 openssl speed .*-bytes 16777216 -evp chacha20-poly1305$' "$README" | head -1)
[ -n "$cmd" ] || { echo "FAIL: README.md shows no 'GPUPROV_STATS=1 openssl speed ... -bytes 16777216 -evp chacha20-poly1305' line"; exit 1; }
args=${cmd#GPUPROV_STATS=1 openssl speed }
echo "README: $cmd"

# run NAME [VAR=VALUE...]: the command under gpuprov's config, a fresh HOME and cache, the host
# executor standing in for the GPU; its output in $tmp/NAME.out
run() {
    name=$1; shift
    mkdir -p "$tmp/$name/home"
    # shellcheck disable=SC2086  # the README's arguments, split as the shell splits them there
    env -u OPENSSL_ia32cap HOME="$tmp/$name/home" XDG_CACHE_HOME= OPENSSL_CONF="$SRC/config/gpuprov.cnf" \
        OPENSSL_MODULES="$GPTEST_MODULE_DIR" GPUPROV_CALIB_CACHE= GPUPROV_CALIB_SYSTEM=off GPUPROV_HYBRID_GPU=host \
        GPUPROV_TEST_CPUS_FREE=1 GPUPROV_STATS=1 "$@" "$OPENSSL" speed $args > "$tmp/$name.out" 2>&1
}
stat_of() { sed -n "s/^gpuprov stats: .* $2=\([0-9]*\).*/\1/p" "$tmp/$1.out" | head -1; }

class=$(grep -o -m1 -w 'avx2' /proc/cpuinfo || true)
if [ -z "$class" ]; then
    echo "SKIP: cores without AVX2: no class of the priors covers this host"
    exit 77
fi

# A fresh host of a covered class: routed to the GPU at the first message, by the priors.
if run h200 GPUPROV_TEST_GPU_MODEL="NVIDIA H200"; then
    g=$(stat_of h200 routed_gpu); h=$(stat_of h200 host_ops)
    if [ "${g:-0}" -ge 1 ] && [ "${h:-0}" -ge 1 ] && grep -q "^gpuprov hybrid: chacha20-poly1305 from the priors of" "$tmp/h200.out"; then
        echo "ok: fresh H200-class host: the 16 MiB message ran on the GPU side (routed_gpu=$g host_ops=$h), by the priors"
    else
        fail "fresh H200-class host: routed_gpu=${g:-none} host_ops=${h:-none}, want >= 1 and the priors named" "$tmp/h200.out"
    fi
else
    fail "the README's command failed (rc $?)" "$tmp/h200.out"
fi
# No cache was written by the priors: a later process still has nothing measured.
if ls "$tmp/h200/home/.cache/gpuprov"/calib-*.txt > /dev/null 2>&1; then
    fail "the priors were written to the user's cache as if measured"
else
    echo "ok: the priors are not written to the user's cache"
fi

# A host no class covers: the lone caller's message stays on the CPU (it cannot move later).
if run unknown GPUPROV_TEST_GPU_MODEL="NVIDIA A100-SXM4-80GB"; then
    g=$(stat_of unknown routed_gpu); h=$(stat_of unknown host_ops)
    if [ "${g:-1}" -eq 0 ] && [ "${h:-1}" -eq 0 ]; then
        echo "ok: a host no class covers: the message stayed on the CPU (routed_gpu=0)"
    else
        fail "unknown host: routed_gpu=${g:-none} host_ops=${h:-none}, want 0" "$tmp/unknown.out"
    fi
else
    fail "the README's command failed on the unknown host (rc $?)" "$tmp/unknown.out"
fi

# gpuprov-calibrate measures this host (the host executor, which never wins) and its numbers
# replace the priors: the same command now keeps the message on the CPU, from the cache.
mkdir -p "$tmp/calibrated/home"
if HOME="$tmp/calibrated/home" XDG_CACHE_HOME= OPENSSL_MODULES="$GPTEST_MODULE_DIR" GPUPROV_CALIB_CACHE= \
    GPUPROV_CALIB_SYSTEM=off GPUPROV_HYBRID_GPU=host GPUPROV_TEST_GPU_MODEL="NVIDIA H200" \
    "$GPTEST_CALIBRATE" > "$tmp/calibrate.out" 2>&1; then
    echo "ok: gpuprov-calibrate: $(tail -1 "$tmp/calibrate.out")"
    # The measurement keeps the message on the CPU: the stats say the numbers came from the cache,
    # or (issue 52.2) that the GPU was not even opened because they keep everything on the CPU.
    if run calibrated GPUPROV_TEST_GPU_MODEL="NVIDIA H200" \
        && grep -qE "^gpuprov hybrid: chacha20-poly1305 from the cache:|^gpuprov warm-up: gpu not opened: the calibration keeps every message" "$tmp/calibrated.out" \
        && [ "$(stat_of calibrated routed_gpu)" = 0 ] && [ "$(stat_of calibrated host_ops)" = 0 ]; then
        echo "ok: after gpuprov-calibrate the measurement decides, not the priors"
    else
        fail "after gpuprov-calibrate: want the cache's numbers and routed_gpu=0" "$tmp/calibrated.out"
    fi
else
    fail "gpuprov-calibrate failed" "$tmp/calibrate.out"
fi
[ "$failures" -eq 0 ] && echo "first run: all checks passed"
exit "$failures"
