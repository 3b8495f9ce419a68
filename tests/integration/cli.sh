# SPDX-License-Identifier: Apache-2.0
# The stock openssl CLI with config/gpuprov.cnf: provider active, ciphers listed, enc equal to default, stats, backend knob, speed -async_jobs.
#
# Environment (set by tests/integration/meson.build): OPENSSL (the openssl binary), OPENSSL_CONF
# (config/gpuprov.cnf), OPENSSL_MODULES (the build's provider dir), GPTEST_SOURCE_ROOT,
# GPUPROV_BACKEND (the executor of this run). GPTEST_UNDER_TEST=default checks the script itself
# without the module: "gpuprov" then means the default provider and the stats checks are skipped.
# $enc holds an openssl command line split on purpose (no element has spaces or glob characters).
# shellcheck disable=SC2086
set -u
# The gpu suite's runs skip (exit 77, meson's "skipped") on a machine without a GPU.
if [ "${GPTEST_NEEDS_GPU:-0}" = 1 ] && [ ! -e /dev/nvidiactl ]; then
    echo "SKIP: no NVIDIA GPU on this machine (the gpu suite needs one)"; exit 77
fi

OPENSSL=${OPENSSL:-openssl}
SRC=${GPTEST_SOURCE_ROOT:?GPTEST_SOURCE_ROOT is not set}
EXECUTOR=${GPUPROV_BACKEND:-}
CONF=${OPENSSL_CONF:?OPENSSL_CONF is not set}
KNOB_CONF=$SRC/tests/integration/backend-host.cnf
PROV=gpuprov
UNDER_DEFAULT=0
if [ "${GPTEST_UNDER_TEST:-}" = default ]; then
    PROV=default
    UNDER_DEFAULT=1
fi
unset GPUPROV_STATS

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
failures=0

fail() {   # fail MESSAGE [FILE...]: report, show the files, go on
    msg=$1
    shift
    echo "FAIL: $msg"
    for f in "$@"; do
        echo "----- $(basename "$f"):"
        cat "$f"
    done
    echo "-----"
    failures=$((failures + 1))
}

pass() {
    echo "ok: $1"
}

# run NAME CMD...: stdout to $tmp/NAME.out, stderr to $tmp/NAME.err; echoes the command.
run() {
    name=$1
    shift
    echo "+ $*" > "$tmp/$name.cmd"
    "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
}

echo "cli.sh: OPENSSL=$OPENSSL ($("$OPENSSL" version 2>&1)) OPENSSL_CONF=$CONF"
echo "cli.sh: OPENSSL_MODULES=${OPENSSL_MODULES:-(unset)} executor=${EXECUTOR:-(unset)}"
if [ "$UNDER_DEFAULT" = 0 ] && [ ! -f "${OPENSSL_MODULES:-.}/gpuprov.so" ]; then
    echo "FAIL: ${OPENSSL_MODULES:-(OPENSSL_MODULES unset)}/gpuprov.so does not exist: build the provider first"
    exit 1
fi

# 1. openssl list -providers: gpuprov listed with "status: active".
if run providers "$OPENSSL" list -providers; then
    # The block of a provider runs from "  NAME" to the next line indented by two spaces only.
    status=$(awk -v p="$PROV" '
        /^  [^ ]/ { inblk = ($1 == p) ; next }
        inblk && $1 == "status:" { print $2 }' "$tmp/providers.out")
    if [ "$status" = active ]; then
        pass "list -providers shows $PROV active"
    else
        fail "list -providers: $PROV is not listed with status: active" \
            "$tmp/providers.cmd" "$tmp/providers.out" "$tmp/providers.err"
    fi
else
    fail "openssl list -providers failed" "$tmp/providers.cmd" "$tmp/providers.out" "$tmp/providers.err"
fi

# 2. openssl list -cipher-algorithms -provider gpuprov: every name on a line "{ names } @ gpuprov".
if run ciphers "$OPENSSL" list -cipher-algorithms -provider "$PROV"; then
    grep " @ $PROV\$" "$tmp/ciphers.out" | sed "s/ @ $PROV\$//; s/[{},]/ /g" | tr ' ' '\n' \
        | sed '/^$/d' > "$tmp/names"
    missing=""
    for n in AES-128-CTR AES-192-CTR AES-256-CTR AES-128-GCM AES-192-GCM AES-256-GCM \
             id-aes128-GCM id-aes192-GCM id-aes256-GCM 2.16.840.1.101.3.4.1.6 \
             2.16.840.1.101.3.4.1.26 2.16.840.1.101.3.4.1.46 ChaCha20 ChaCha20-Poly1305; do
        grep -qixF -- "$n" "$tmp/names" || missing="$missing $n"
    done
    if [ -z "$missing" ]; then
        pass "list -cipher-algorithms lists all eight ciphers and GCM aliases @ $PROV"
    else
        fail "list -cipher-algorithms: not listed @ $PROV:$missing" "$tmp/ciphers.cmd" "$tmp/ciphers.out"
    fi
else
    fail "openssl list -cipher-algorithms failed" "$tmp/ciphers.cmd" "$tmp/ciphers.err"
fi

# stats_check NAME ERRFILE EXPR: exactly one "gpuprov stats: " line with all keys, numeric values,
# and the awk condition EXPR (over the keys as variables) true.
stats_check() {
    what=$1
    errf=$2
    cond=$3
    if [ "$UNDER_DEFAULT" = 1 ]; then
        return 0
    fi
    nlines=$(grep -c '^gpuprov stats: ' "$errf")
    if [ "$nlines" != 1 ]; then
        fail "$what: want exactly one 'gpuprov stats: ' line on stderr, got $nlines" "$errf"
        return 0
    fi
    verdict=$(grep '^gpuprov stats: ' "$errf" | awk -v cond="$cond" '
        {
            for (i = 3; i <= NF; i++) {
                eq = index($i, "=")
                if (eq < 2) { print "malformed pair \"" $i "\""; exit }
                k = substr($i, 1, eq - 1); v = substr($i, eq + 1)
                if (v !~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) { print "non-numeric " $i; exit }
                val[k] = v + 0; seen[k] = 1
            }
            n = split("ops bytes cuda_ops host_ops cpu_ops batches mean_batch async_ops fallbacks errors", need, " ")
            for (i = 1; i <= n; i++) if (!(need[i] in seen)) { print "missing key " need[i]; exit }
            # cond: "KEY OP NUMBER" clauses joined by "&&", e.g. "ops > 0 && cpu_ops == 0"
            m = split(cond, cl, "&&")
            for (i = 1; i <= m; i++) {
                split(cl[i], t, " ")
                a = val[t[1]]; b = t[3] + 0; op = t[2]
                ok = (op == ">" && a > b) || (op == "==" && a == b) || (op == ">=" && a >= b)
                if (!ok) { print "want " cl[i] ", have " t[1] "=" a; exit }
            }
            print "ok"
        }')
    if [ "$verdict" = ok ]; then
        pass "$what: stats line has all keys and $cond"
    else
        fail "$what: stats line: $verdict" "$errf"
    fi
}

# 3. openssl enc round trips: gpuprov (preferred through the config alone) against the default
# provider alone (OPENSSL_CONF=/dev/null), byte for byte, both directions. enc refuses AEAD modes,
# so CTR and ChaCha20 are what the CLI can exercise here.
"$OPENSSL" rand -out "$tmp/plain" 100003 2> "$tmp/rand.err" || fail "openssl rand failed" "$tmp/rand.err"
# A forced executor runs everything: GPUPROV_BACKEND=host means no cpu ops, and the other way round.
case "$EXECUTOR" in
    host) executor_cond=" && host_ops > 0 && cpu_ops == 0 && cuda_ops == 0" ;;
    cpu) executor_cond=" && cpu_ops > 0 && host_ops == 0 && cuda_ops == 0" ;;
    cuda) executor_cond=" && cuda_ops > 0" ;;
    *) executor_cond="" ;;
esac
KEY=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
IV=f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff
for spec in aes-128-ctr:32 aes-192-ctr:48 aes-256-ctr:64 chacha20:64; do
    alg=${spec%%:*}
    key=$(printf %s "$KEY" | cut -c1-"${spec#*:}")
    enc="enc -$alg -K $key -iv $IV -nosalt"
    if ! run "ref-$alg" env OPENSSL_CONF=/dev/null "$OPENSSL" $enc -provider default \
            -in "$tmp/plain" -out "$tmp/$alg.ref"; then
        fail "$alg: reference encryption with the default provider failed" "$tmp/ref-$alg.cmd" "$tmp/ref-$alg.err"
        continue
    fi
    if ! run "gp-$alg" env GPUPROV_STATS=1 "$OPENSSL" $enc -in "$tmp/plain" -out "$tmp/$alg.gp"; then
        fail "$alg: encryption through $CONF failed" "$tmp/gp-$alg.cmd" "$tmp/gp-$alg.err"
        continue
    fi
    if cmp -s "$tmp/$alg.ref" "$tmp/$alg.gp"; then
        pass "$alg: enc through the config equals the default provider's output"
    else
        fail "$alg: ciphertexts differ ($(cmp "$tmp/$alg.ref" "$tmp/$alg.gp" 2>&1))" "$tmp/gp-$alg.cmd"
    fi
    stats_check "$alg enc with GPUPROV_STATS=1 (executor $EXECUTOR)" "$tmp/gp-$alg.err" \
        "ops > 0 && bytes >= 100003$executor_cond"
    # Explicit property query, decrypting the default provider's ciphertext.
    if run "gpd-$alg" "$OPENSSL" $enc -d -propquery "provider=$PROV" -in "$tmp/$alg.ref" \
            -out "$tmp/$alg.gpd" && cmp -s "$tmp/plain" "$tmp/$alg.gpd"; then
        pass "$alg: $PROV (-propquery provider=$PROV) decrypts the default provider's ciphertext"
    else
        fail "$alg: $PROV decryption of the default provider's ciphertext" "$tmp/gpd-$alg.cmd" "$tmp/gpd-$alg.err"
    fi
    if run "dfd-$alg" env OPENSSL_CONF=/dev/null "$OPENSSL" $enc -d -provider default \
            -in "$tmp/$alg.gp" -out "$tmp/$alg.dfd" && cmp -s "$tmp/plain" "$tmp/$alg.dfd"; then
        pass "$alg: the default provider decrypts $PROV's ciphertext"
    else
        fail "$alg: default decryption of $PROV's ciphertext" "$tmp/dfd-$alg.cmd" "$tmp/dfd-$alg.err"
    fi
    # Without GPUPROV_STATS and with stats unset in the config: no stats line.
    if run "quiet-$alg" "$OPENSSL" $enc -in "$tmp/plain" -out "$tmp/$alg.quiet" \
            && ! grep -q '^gpuprov stats: ' "$tmp/quiet-$alg.err"; then
        pass "$alg: no stats line without GPUPROV_STATS"
    else
        fail "$alg: quiet run failed or printed stats" "$tmp/quiet-$alg.cmd" "$tmp/quiet-$alg.err"
    fi
done

# 4. The config knobs: backend = host and stats = 1 in the gpuprov section (backend-host.cnf);
# GPUPROV_BACKEND=cpu in the environment overrides the knob.
enc="enc -aes-256-ctr -K $KEY -iv $IV -nosalt -in $tmp/plain"
if run knob-host sh -c 'unset GPUPROV_BACKEND GPUPROV_STATS; exec "$@"' sh \
        env OPENSSL_CONF="$KNOB_CONF" "$OPENSSL" $enc -out "$tmp/knob-host.ct" \
        && cmp -s "$tmp/knob-host.ct" "$tmp/aes-256-ctr.ref"; then
    pass "backend = host: output equals the default provider's"
    stats_check "backend = host in the config" "$tmp/knob-host.err" "ops > 0 && host_ops > 0 && cpu_ops == 0 && cuda_ops == 0"
else
    fail "backend = host: enc failed or output differs" "$tmp/knob-host.cmd" "$tmp/knob-host.err"
fi
if run knob-cpu sh -c 'unset GPUPROV_STATS; exec "$@"' sh \
        env OPENSSL_CONF="$KNOB_CONF" GPUPROV_BACKEND=cpu "$OPENSSL" $enc -out "$tmp/knob-cpu.ct" \
        && cmp -s "$tmp/knob-cpu.ct" "$tmp/aes-256-ctr.ref"; then
    pass "GPUPROV_BACKEND=cpu over backend = host: output equals the default provider's"
    stats_check "GPUPROV_BACKEND=cpu overriding the knob" "$tmp/knob-cpu.err" "ops > 0 && cpu_ops > 0 && host_ops == 0 && cuda_ops == 0"
else
    fail "GPUPROV_BACKEND=cpu with backend-host.cnf: enc failed or output differs" "$tmp/knob-cpu.cmd" "$tmp/knob-cpu.err"
fi

# 5. openssl speed -async_jobs 8: each job pauses inside gpuprov (host and cuda executors) and the
# dispatcher runs their requests together, so a batch holds more than one request; the cpu
# executor runs them inline (nothing pauses). The hybrid policy sends async jobs' eligible
# messages (1 KiB here, over min_gpu_bytes) to its GPU side (batching/policy/hybrid.c, rule 4).
# The config, hence gpuprov, serves speed's cipher.
case "$EXECUTOR" in
    host|cuda|hybrid) async_cond="ops > 0 && async_ops > 0 && mean_batch > 1" ;;
    *) async_cond="ops > 0 && async_ops == 0" ;;
esac
if run speed-async env GPUPROV_STATS=1 "$OPENSSL" speed -seconds 1 -bytes 1024 -async_jobs 8 \
        -evp aes-128-ctr && grep -q '^AES-128-CTR ' "$tmp/speed-async.out"; then
    pass "speed -async_jobs 8 -evp aes-128-ctr: $(grep '^AES-128-CTR ' "$tmp/speed-async.out" | tr -s ' ')"
    stats_check "speed -async_jobs 8 (executor $EXECUTOR)" "$tmp/speed-async.err" "$async_cond"
else
    fail "openssl speed -async_jobs 8 failed" "$tmp/speed-async.cmd" "$tmp/speed-async.out" "$tmp/speed-async.err"
fi

if [ "$failures" -gt 0 ]; then
    echo "cli.sh: $failures check(s) failed"
    exit 1
fi
echo "cli.sh: all checks passed"
exit 0
