#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The first run on a fresh host (issue 53): `openssl speed -seconds S -bytes 16777216` per cipher,
# the default provider against gpuprov's default configuration with an empty calibration cache (no
# machine calibration either: what a new user's first command meets) and against forced GPU,
# interleaved, medians of REPEAT, under each OpenSSL line given. Prints a Markdown table; CSV rows on
# stdout's companion file (OUT, default bench/data/first-run-<host>.csv).
#
# usage: bench/first_run.sh [LINE...]   LINE = system | BUILD:PREFIX
#   system          the openssl on PATH with build/provider
#   BUILD:PREFIX    the openssl of PREFIX (a source build: PREFIX/bin, PREFIX/lib; or Debian packages
#                   unpacked with dpkg -x: PREFIX/usr/bin, PREFIX/usr/lib/x86_64-linux-gnu) with
#                   BUILD/provider (a module built against 3.0's headers loads in 3.5 too)
# e.g. bench/first_run.sh system build-d35:/tmp/o359
# Environment: REPEAT (3), SECONDS_PER_RUN (2), CIPHERS ("chacha20-poly1305 aes-256-gcm aes-128-ctr"),
#              CONFIGS ("default fresh forced"), OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
lines=("$@"); [ ${#lines[@]} -gt 0 ] || lines=(system)
repeat=${REPEAT:-3} secs=${SECONDS_PER_RUN:-2}
ciphers=${CIPHERS:-chacha20-poly1305 aes-256-gcm aes-128-ctr}
configs=${CONFIGS:-default fresh forced}
out=${OUT:-$root/bench/data/first-run-$(hostname -s).csv}
mkdir -p "$(dirname "$out")"
[ -f "$out" ] || echo "date,gpu,openssl,gpuprov_commit,cipher,bytes,config,rep,gbps,routed_gpu,cuda_ops,cpu_ops,warm_open_ms,source" > "$out"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); gpu=${gpu:-none}
commit=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo -dirty)

# line_env LINE: sets bin, lib, mods for a line
line_env() {
    if [ "$1" = system ]; then bin=$(command -v openssl); lib=""; mods=$root/build/provider; return; fi
    local build=${1%%:*} prefix=${1#*:}
    mods=$root/$build/provider; [ -d "$build/provider" ] && mods=$(cd "$build/provider" && pwd)
    if [ -x "$prefix/usr/bin/openssl" ]; then bin=$prefix/usr/bin/openssl; lib=$prefix/usr/lib/x86_64-linux-gnu
    else bin=$prefix/bin/openssl; lib=$prefix/lib; [ -d "$prefix/lib64" ] && lib=$prefix/lib64; fi
}

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for rep in $(seq 1 "$repeat"); do
  for line in "${lines[@]}"; do
    line_env "$line"
    ver=$(LD_LIBRARY_PATH=$lib "$bin" version | awk '{print $2}')
    for c in $ciphers; do
      for cfg in $configs; do
        conf=$root/config/gpuprov.cnf env=(GPUPROV_CALIB_SYSTEM=off GPUPROV_CALIB_CACHE="$(mktemp -d -p "$tmp")")
        case $cfg in default) conf=/dev/null ;; forced) env+=(GPUPROV_BACKEND=cuda) ;; esac
        o=$(env "${env[@]}" LD_LIBRARY_PATH="$lib" OPENSSL_CONF="$conf" OPENSSL_MODULES="$mods" GPUPROV_STATS=1 \
              "$bin" speed -mr -elapsed -seconds "$secs" -bytes 16777216 -evp "$c" 2>&1)
        gbps=$(awk -F: '/^\+F:/{printf "%.2f", $4/1e9}' <<< "$o")
        st() { sed -n "s/^gpuprov stats: .* $1=\([0-9]*\).*/\1/p" <<< "$o" | head -1; }
        warm=$(sed -n 's/^gpuprov warm-up: open \([0-9.]*\) ms.*/\1/p' <<< "$o" | head -1)
        alg=$(sed 's/-[0-9]*-/-/' <<< "$c")   # the stats line's name: aes-256-gcm -> aes-gcm
        src=$(grep -m1 "^gpuprov hybrid: $alg " <<< "$o" | sed "s/^gpuprov hybrid: $alg \([^:]*\).*/\1/; s/,/;/g")
        echo "$(date -u +%F),$gpu,$ver,$commit,$c,16777216,$cfg,$rep,${gbps:-fail},$(st routed_gpu),$(st cuda_ops),$(st cpu_ops),$warm,$src" | tee -a "$out" > "$tmp/last"
        echo "  $ver $c $cfg rep $rep: ${gbps:-FAILED} GB/s ${src:+($src)}" >&2
      done
    done
  done
done
# The table: medians per (openssl, cipher, config) over this run's rows.
python3 - "$out" "$commit" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["gpuprov_commit"] == sys.argv[2] and r["gbps"] != "fail"]
cells = {}
for r in rows:
    cells.setdefault((r["openssl"], r["cipher"]), {}).setdefault(r["config"], []).append(float(r["gbps"]))
print("| OpenSSL | cipher | default provider | gpuprov, fresh host | forced GPU | fresh / default | runs |")
print("|---|---|---|---|---|---|---|")
for (v, c), d in sorted(cells.items()):
    m = {k: statistics.median(x) for k, x in d.items()}
    ratio = "%.2f×" % (m["fresh"] / m["default"]) if "fresh" in m and m.get("default") else "–"
    f = lambda k: "%.2f" % m[k] if k in m else "–"
    print("| %s | %s | %s | %s | %s | %s | %d |" % (v, c, f("default"), f("fresh"), f("forced"), ratio,
                                                      len(d.get("default", []))))
PY
