#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B of two builds of gpuprov by openssl speed, interleaved: old, new and the default provider
# (twice: its A/A) in turn, each cell AB_REPS times; prints the medians and new/old beside the
# default's own spread (default run 2 / run 1), so a difference can be told from the host's noise.
# usage: bench/ab_speed.sh OLD_MODULE_DIR NEW_MODULE_DIR
#   AB_SIZES (default 16384,1048576,16777216), AB_CIPHERS (aes-256-gcm,aes-128-ctr,chacha20-poly1305),
#   AB_ASYNC (32; 0: none), AB_SECONDS (2), AB_REPS (3), AB_BACKEND (cuda): the knob both modules run with.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=$(cd "${1:?usage: bench/ab_speed.sh OLD_MODULE_DIR NEW_MODULE_DIR}" && pwd)
new=$(cd "${2:?usage: bench/ab_speed.sh OLD_MODULE_DIR NEW_MODULE_DIR}" && pwd)
sizes=${AB_SIZES:-16384,1048576,16777216}
ciphers=${AB_CIPHERS:-aes-256-gcm,aes-128-ctr,chacha20-poly1305}
reps=${AB_REPS:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# One speed run; prints its rate in GB/s (speed -mr: "+F:index:name:rate", bytes/s).
one() {   # WHO CIPHER BYTES
  local who=$1 c=$2 b=$3 line
  local args=(speed -mr -elapsed -seconds "${AB_SECONDS:-2}" -bytes "$b" -evp "$c")
  [ "${AB_ASYNC:-32}" -gt 0 ] && args+=(-async_jobs "${AB_ASYNC:-32}")   # 0: one synchronous stream
  case $who in
    old|new) local dir=$old; [ "$who" = new ] && dir=$new
             line=$(OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$dir" GPUPROV_BACKEND="${AB_BACKEND:-cuda}" \
                    timeout 120 openssl "${args[@]}" 2>/dev/null | grep '^+F:' | tail -1) ;;
    *) line=$(OPENSSL_CONF=/dev/null timeout 120 openssl "${args[@]}" 2>/dev/null | grep '^+F:' | tail -1) ;;
  esac
  awk -F: -v l="$line" 'BEGIN { n = split(l, f, ":"); printf "%.3f\n", (n > 0 ? f[n] : 0) / 1e9 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

IFS=, read -r -a S <<<"$sizes"
IFS=, read -r -a C <<<"$ciphers"
for r in $(seq "$reps"); do
  for c in "${C[@]}"; do
    for b in "${S[@]}"; do
      for who in old new def1 def2; do
        one "$who" "$c" "$b" >>"$tmp/$c.$b.$who"
      done
    done
  done
done
printf '%-18s %9s %9s %9s %9s %9s %8s %8s\n' cipher bytes old new default default2 new/old def2/def1
for c in "${C[@]}"; do
  for b in "${S[@]}"; do
    o=$(median <"$tmp/$c.$b.old"); n=$(median <"$tmp/$c.$b.new")
    d1=$(median <"$tmp/$c.$b.def1"); d2=$(median <"$tmp/$c.$b.def2")
    awk -v c="$c" -v b="$b" -v o="$o" -v n="$n" -v d1="$d1" -v d2="$d2" 'BEGIN {
      printf "%-18s %9d %9.2f %9.2f %9.2f %9.2f %8.3f %8.3f\n", c, b, o, n, d1, d2, (o > 0 ? n / o : 0), (d1 > 0 ? d2 / d1 : 0) }'
  done
done
echo "(GB/s, medians of $reps interleaved runs of openssl speed -seconds ${AB_SECONDS:-2} -async_jobs ${AB_ASYNC:-32}; backend ${AB_BACKEND:-cuda}; $(openssl version))"
