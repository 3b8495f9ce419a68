# SPDX-License-Identifier: Apache-2.0
# The README's shell commands that a CI machine can run, extracted from README.md and run as written: rc 0 and gpuprov serving.
#
# README.md marks each such block with an HTML comment starting `<!-- readme-test` on the line
# before its ```sh fence. Each block runs in a fresh shell, in a scratch directory whose config/
# and build/ are links to the source tree's config/ and this build (the README's commands name
# `$PWD/config` and `build/provider`), with `openssl` on PATH meaning $OPENSSL and without the
# OPENSSL_CONF / OPENSSL_MODULES of the test environment (a block sets what it needs itself).
# GPUPROV_STATS=1 in the environment proves gpuprov did the work of each `openssl speed`.
#
# Also checked in README.md: the two set-up commands are there as written, and no `-propquery`
# demands gpuprov (`provider=gpuprov` without `?`: OpenSSL 3.0.13's speed then fetches its DRBG
# under that query, fails and exits 1).
#
# Environment (tests/integration/meson.build): OPENSSL, GPTEST_SOURCE_ROOT, GPTEST_BUILD_ROOT.
set -u

OPENSSL=${OPENSSL:-$(command -v openssl)}
SRC=${GPTEST_SOURCE_ROOT:?GPTEST_SOURCE_ROOT is not set}
BUILD=${GPTEST_BUILD_ROOT:?GPTEST_BUILD_ROOT is not set}
README=$SRC/README.md
failures=0

fail() {   # fail MESSAGE [FILE...]
    echo "FAIL: $1"
    shift
    for f in "$@"; do
        echo "----- $(basename "$f"):"
        cat "$f"
    done
    failures=$((failures + 1))
}

pass() {
    echo "ok: $1"
}

if [ ! -f "$BUILD/provider/gpuprov.so" ]; then
    echo "FAIL: $BUILD/provider/gpuprov.so does not exist: build the provider first"
    exit 1
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir "$tmp/work" "$tmp/bin"
ln -s "$SRC/config" "$tmp/work/config"
ln -s "$BUILD" "$tmp/work/build"
ln -s "$OPENSSL" "$tmp/bin/openssl"

# The two set-up commands, each on a line of its own (an indented code line).
for cmd in "bash bench/main-job.sh" "bash tests/run-all.sh"; do
    if grep -qxF "    $cmd" "$README"; then
        pass "README shows the set-up command '$cmd'"
    else
        fail "README lacks the set-up command '$cmd' as a code line"
    fi
done


# Extract the marked blocks: one command a line (backslash continuations joined), block by block.
awk -v dir="$tmp" '
    /^<!-- readme-test/ { want = 1; next }
    want && /^```sh[ \t]*$/ { inblk = 1; want = 0; n++; next }
    inblk && /^```[ \t]*$/ { inblk = 0; next }
    inblk {
        line = cont $0
        if (line ~ /\\$/) { cont = substr(line, 1, length(line) - 1); next }
        cont = ""
        print line > (dir "/block" n ".cmds")
    }' "$README"

# No mandatory gpuprov query in any command the README shows (indented code lines and fenced
# blocks; the prose may name the form it warns against).
awk '/^```/ { fence = !fence; next } fence || /^(    |\t)/' "$README" \
    | grep -nE -- "-propquery +['\"]?provider=" > "$tmp/mandatory"
if [ -s "$tmp/mandatory" ]; then
    fail "README shows a mandatory -propquery (write '?provider=gpuprov')" "$tmp/mandatory"
else
    pass "README's commands use the optional -propquery form"
fi

nblocks=0
ncmds=0
nspeed=0
for cmds in "$tmp"/block*.cmds; do
    [ -f "$cmds" ] || continue
    nblocks=$((nblocks + 1))
    b=$(basename "$cmds" .cmds)
    # One shell for the block, so that an `export` line carries to the commands after it; each
    # command's output and status kept apart.
    i=0
    : > "$tmp/$b.sh"
    while IFS= read -r cmd; do
        i=$((i + 1))
        printf '%s\n' "$cmd" > "$tmp/$b.$i.cmd"
        printf '{ %s\n} > %s 2> %s; echo $? > %s\n' "$cmd" "$tmp/$b.$i.out" "$tmp/$b.$i.err" \
            "$tmp/$b.$i.rc" >> "$tmp/$b.sh"
    done < "$cmds"
    (cd "$tmp/work" && env -u OPENSSL_CONF -u OPENSSL_MODULES -u GPUPROV_BACKEND \
        PATH="$tmp/bin:$PATH" GPUPROV_STATS=1 sh "$tmp/$b.sh")
    for j in $(seq 1 "$i"); do
        ncmds=$((ncmds + 1))
        cmd=$(cat "$tmp/$b.$j.cmd")
        out=$tmp/$b.$j.out
        err=$tmp/$b.$j.err
        rc=$(cat "$tmp/$b.$j.rc" 2>/dev/null || echo missing)
        if [ "$rc" != 0 ]; then
            fail "$b: '$cmd' exited $rc" "$out" "$err"
            continue
        fi
        case "$cmd" in
        *"openssl list -providers"*)
            status=$(awk '/^  [^ ]/ { inblk = ($1 == "gpuprov"); next }
                          inblk && $1 == "status:" { print $2 }' "$out")
            if [ "$status" = active ]; then
                pass "$b: '$cmd' shows gpuprov active"
            else
                fail "$b: '$cmd': gpuprov is not listed as active" "$out" "$err"
            fi ;;
        *"openssl list -cipher-algorithms"*)
            if grep -qi "aes-256-gcm.* @ gpuprov\$" "$out"; then
                pass "$b: '$cmd' lists gpuprov's ciphers"
            else
                fail "$b: '$cmd': no AES-256-GCM @ gpuprov" "$out" "$err"
            fi ;;
        *"openssl speed"*)
            nspeed=$((nspeed + 1))
            ops=$(sed -n 's/^gpuprov stats: ops=\([0-9]*\) .*/\1/p' "$err" | head -1)
            if ! grep -qE '^[A-Za-z0-9-]+ +[0-9.]+k' "$out"; then
                fail "$b: '$cmd' printed no result line" "$out" "$err"
            elif [ "${ops:-0}" -gt 0 ]; then
                pass "$b: '$cmd' printed a result; gpuprov served $ops operations"
            elif grep -q '^gpuprov passthrough: ' "$err"; then
                pass "$b: '$cmd' printed a result; gpuprov served it through passthrough (no GPU here)"
            else
                fail "$b: '$cmd': gpuprov did not serve it (no stats line with ops > 0)" "$out" "$err"
            fi ;;
        *)
            pass "$b: '$cmd' ran (rc 0)" ;;
        esac
    done
done

# The README must keep commands for this test to run; fewer means the markers were lost.
if [ "$nblocks" -lt 2 ] || [ "$nspeed" -lt 2 ]; then
    fail "found $nblocks marked blocks, $ncmds commands, $nspeed openssl speed runs in README.md (want 2 blocks and 2 speed runs at least)"
fi
echo "readme_commands.sh: $nblocks blocks, $ncmds commands, $failures failure(s)"
[ "$failures" = 0 ]
