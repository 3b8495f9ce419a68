# SPDX-License-Identifier: Apache-2.0
"""The comparison: `openssl speed` for AES-256-GCM, AES-128-CTR and ChaCha20-Poly1305,
the default provider against gpuprov, over message sizes x -async_jobs x -multi.

The default matrix: sizes 16 B to 16 MiB (16, 256, 1024, 16384, 262144, 1048576, 16777216),
-async_jobs 0 and 32, -multi 1, three configurations (default, gpuprov, gpuprov-cuda) in every
cell, 3 repeats: 378 runs, about 15 minutes on a GPU host (1-s runs, each process's start-up and
gpuprov's GPU opening included). --quick: 16 B, 16 KiB and 1 MiB, async 0 and 32, one repeat
(54 runs, about 2 minutes). The target it checks: in every cell gpuprov's default configuration
reaches >= 0.9x the better of the default provider and forced GPU ("vs best" column). Forced cuda
opens the GPU at EVP init, before speed starts its clock; the default configuration opens it at
the first large update, inside the timed seconds (the CSV's warm_open_ms and warm_measure_ms say
how long): --seconds 3 shows the steady state.

One `openssl speed -mr -elapsed -seconds S -bytes N` process per (cipher, size, async_jobs, multi,
configuration), so that the CPU time of each (user + sys of the whole process tree, from
getrusage(RUSAGE_CHILDREN) around it: provider helper threads and -multi children included) can be
set against the bytes it encrypted: "CPU s/GB". A speed-up bought with helper threads shows there.

Configurations:
  default       plain `openssl speed` with OPENSSL_CONF=/dev/null (the default provider)
  default-aa    the same again in every cell (--aa): its ratio to the first is the A/A column,
                the noise an A/B ratio of that cell is to be read against
  gpuprov       gpuprov as a user gets it: OPENSSL_CONF=config/gpuprov.cnf, backend=auto (hybrid)
  gpuprov-cuda  the same with GPUPROV_BACKEND=cuda (forced); only on a host with an NVIDIA GPU
  gpuprov-host, gpuprov-cpu   forced executors, on request (--configs)
Forced configurations run only at the largest -async_jobs and -multi 1 (the summary's cell) unless
--forced-everywhere. Every configuration runs under the system's `openssl`, or under another
OpenSSL installation with --openssl PREFIX (see --help).

Every gpuprov run has GPUPROV_STATS=1 (unless --no-stats): the stats line(s) it prints at unload
are parsed into the CSV (ops, batches, mean batch, executor split) and prove that gpuprov did the
work; a gpuprov run without a stats line stops the comparison.

Writes CSV (row by row, so an interrupted run keeps what it measured), a JSON sidecar with the
run's command and host, PNG plots when matplotlib is importable, and the section between
<!-- compare:begin --> and <!-- compare:end --> of bench/RESULTS.md. `--plot-only CSV` redraws
the plots and that section from an earlier CSV.
"""

import argparse
import csv
import ctypes
import datetime
import json
import math
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchlib import (OPENSSL_HELP, ROOT, OpenSSL, csv_list, fmt_dur, host_info, median,
                      parse_stats, say, short_version, wrap_prose, write_section)

CIPHERS = ["aes-256-gcm", "aes-128-ctr", "chacha20-poly1305"]
SIZES = [16, 256, 1024, 16384, 262144, 1048576, 16777216]
ASYNC = [0, 32]
MULTI = [1]
QUICK_SIZES = [16, 16384, 1048576]
TARGET_VS_BEST = 0.9   # gpuprov (default configuration) / max(default, gpuprov-cuda), per cell
FORCED = {"gpuprov-cuda": "cuda", "gpuprov-host": "host", "gpuprov-cpu": "cpu"}
# default-aa: the default provider again, beside itself in the same cell (the run's noise floor: an
# A/B ratio means something only where the A/A one is close to 1).
DEFAULTS = ("default", "default-aa")
KNOWN_CONFIGS = ["default", "gpuprov"] + list(FORCED) + ["default-aa"]
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
PRETTY = {"aes-256-gcm": "AES-256-GCM", "aes-128-ctr": "AES-128-CTR",
          "chacha20-poly1305": "ChaCha20-Poly1305"}

FIELDS = ["date", "host_cpu", "cores", "gpu", "openssl", "gpuprov_commit", "cipher", "size",
          "async_jobs", "multi", "config", "rep", "seconds", "status", "bytes_per_s", "ops", "bytes",
          "wall_s", "cpu_s", "cpu_s_per_gb", "cores_busy", "ratio_vs_default",
          "gp_ops", "gp_batches", "gp_mean_batch", "gp_cuda_ops", "gp_host_ops", "gp_cpu_ops",
          "gp_fallbacks", "gp_errors", "gp_routed_gpu", "gp_routed_cpu", "gp_split", "gp_other",
          "calib_cache", "warm_open_ms", "warm_measure_ms", "note"]
STAT_KEYS = ["ops", "batches", "cuda_ops", "host_ops", "cpu_ops", "fallbacks", "errors",
             "routed_gpu", "routed_cpu"]


# ---------------------------------------------------------------------------------------------
# The host

def become_subreaper():
    """Make this process the reaper of orphaned grandchildren (PR_SET_CHILD_SUBREAPER), so that
    -multi children that `openssl speed` leaves unreaped still land in RUSAGE_CHILDREN."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans():
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


# ---------------------------------------------------------------------------------------------
# One openssl speed run

def speed_env(config, build, stats, openssl, cache_dir=None):
    env = openssl.env(os.environ)
    env.pop("GPUPROV_BACKEND", None)
    env.pop("GPUPROV_STATS", None)
    if cache_dir is not None:
        # The hybrid policy's persisted measurements (docs/config.md, calib_cache): a directory of
        # the comparison's own, so that the user's cache neither helps nor hurts it.
        env["GPUPROV_CALIB_CACHE"] = str(cache_dir)
    if config in DEFAULTS:
        env["OPENSSL_CONF"] = "/dev/null"
        env.pop("OPENSSL_MODULES", None)
    else:
        # The user's way in, as bench/speed.sh: config/gpuprov.cnf prefers gpuprov and pins the
        # DRBG to the default provider (`-propquery provider=gpuprov` would move the DRBG too).
        env["OPENSSL_CONF"] = str(ROOT / "config" / "gpuprov.cnf")
        env["OPENSSL_MODULES"] = str(build / "provider")
        env["GPUPROV_BACKEND"] = FORCED.get(config, "auto")
        if stats:
            env["GPUPROV_STATS"] = "1"
    return env


def speed_cmd(cipher, size, async_jobs, multi, seconds, openssl):
    # -elapsed: divide by wall time. Without it speed divides by the process's user CPU time,
    # which flatters a caller that sleeps while the GPU works and penalises helper threads.
    cmd = [openssl.bin, "speed", "-mr", "-elapsed", "-seconds", str(seconds), "-bytes", str(size)]
    if async_jobs > 0:
        cmd += ["-async_jobs", str(async_jobs)]
    if multi > 1:
        cmd += ["-multi", str(multi)]
    return cmd + ["-evp", cipher]


def run_speed(cipher, size, async_jobs, multi, config, seconds, build, stats, openssl,
              cache_dir=None):
    """Run one cell under `openssl` (benchlib.OpenSSL); returns a dict of measured fields
    (status 'ok' or what went wrong)."""
    cmd = speed_cmd(cipher, size, async_jobs, multi, seconds, openssl)
    env = speed_env(config, build, stats, openssl, cache_dir)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    status = "ok"
    try:
        out, err = proc.communicate(timeout=3 * seconds + 60 + multi)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = "timeout"
    reap_orphans()
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    # With -multi the parent prints the sum of its children's rates as its own +F line; the
    # children's lines come back prefixed "Got:". +R:count:name:seconds (stderr) is per process.
    rates = [float(l.split(":")[3]) for l in out.splitlines() if l.startswith("+F:")]
    ops = sum(int(l.split(":")[1]) for l in err.splitlines() if l.startswith("+R:"))
    res = {"status": status, "wall_s": wall, "cpu_s": cpu, "ops": ops, "bytes": ops * size,
           "bytes_per_s": rates[-1] if rates else 0.0, "stderr": err, "cmd": cmd}
    if status == "ok" and (not rates or proc.returncode != 0):
        res["status"] = "no-figures" if not rates else "exit-%d" % proc.returncode
    res["stats"] = parse_stats(err)
    # The warm-up's line (backend auto, where it opened the GPU): opening and measuring, wall ms,
    # summed over processes. A first large message waits for them inside speed's timed seconds,
    # where forced cuda opens the GPU at EVP init, before speed starts its clock.
    warm = re.findall(r"^gpuprov warm-up: open ([\d.]+) ms .*measure ([\d.]+) ms", err, re.M)
    res["warm_open_ms"] = "%.1f" % sum(float(o) for o, _ in warm) if warm else ""
    res["warm_measure_ms"] = "%.1f" % sum(float(m) for _, m in warm) if warm else ""
    return res


def check_gpuprov(config, res, stats_on):
    """The proof that gpuprov served the run: None when fine, else what is wrong."""
    st = res["stats"]
    if config in DEFAULTS:
        return "gpuprov stats line in a default-provider run" if st else None
    if not stats_on:
        return None
    if st is None:
        return "no gpuprov stats line: gpuprov was not loaded"
    if st.get("passthrough"):
        return None   # no GPU: gpuprov's table held the default provider's functions
    # Bytes, not ops: how many requests an EVP call makes is gpuprov's business.
    if st.get("bytes", 0) < res["bytes"] or st.get("ops", 0) == 0:
        return "gpuprov counted %d bytes, speed %d: part of the work bypassed gpuprov" % (
            st.get("bytes", 0), res["bytes"])
    forced = FORCED.get(config)
    if forced and st.get(forced + "_ops", 0) == 0:
        return "forced %s, yet no op ran on it" % forced
    return None


def stats_fields(st):
    if not st:
        return {}
    f = {"gp_" + k: st.get(k, 0) for k in STAT_KEYS}
    f["gp_mean_batch"] = "%.2f" % (st["ops"] / st["batches"]) if st.get("batches") else ""
    ops = st.get("ops", 0)
    parts = ["%s %.0f%%" % (e, 100.0 * st.get(e + "_ops", 0) / ops)
             for e in ("cuda", "host", "cpu") if ops and st.get(e + "_ops", 0)]
    f["gp_split"] = " / ".join(parts)
    other = {k: v for k, v in st.items() if k not in STAT_KEYS and k != "bytes"}
    f["gp_other"] = ";".join("%s=%s" % kv for kv in sorted(other.items()))
    return f


# ---------------------------------------------------------------------------------------------
# Plan and run the matrix

def plan(args, configs):
    """Runs in order: a cell's repeats follow each other, the configurations interleaved within
    each repeat (default, gpuprov, ..., default, gpuprov, ...), so that each gpuprov run has a
    default run of the same cell next to it in time."""
    # Forced executors in every cell of -multi 1 (the target compares with them), and at -multi
    # above 1 only with --forced-everywhere: with -multi 16 a forced-cuda run of a few seconds
    # measures 16 processes creating CUDA contexts at once (2 s and more each).
    forced_multi = 1 if 1 in args.multi else None
    runs = []
    for cipher in args.ciphers:
        for multi in args.multi:
            for async_jobs in args.asyncs:
                for size in args.sizes:
                    for rep in range(1, args.repeat + 1):
                        for config in configs:
                            if (config in FORCED and not args.forced_everywhere
                                    and multi != forced_multi):
                                continue
                            runs.append((cipher, size, async_jobs, multi, config, rep))
    return runs


def fmt_gbs(bps):
    return "%.3f GB/s" % (bps / 1e9) if bps < 1e9 else "%.2f GB/s" % (bps / 1e9)


def cache_files(cache_dir):
    return sorted(cache_dir.glob("calib-*.txt")) if cache_dir is not None else []


def prepare_cache(args, configs, outdir):
    """The directory gpuprov's runs keep their measurements in (None: the user's own), and a note.
    warm: one priming run (not recorded) lets the warm-up measure and write it, so every recorded
    run starts with the numbers a second process on this host has; fresh: emptied before each
    gpuprov run, so each starts as the first process on a host does."""
    if args.calib_cache == "user" or not any(c not in DEFAULTS for c in configs):
        return None, ""
    cache_dir = outdir / "calib-cache"
    if cache_dir.exists():
        for f in cache_dir.iterdir():
            f.unlink()
    cache_dir.mkdir(parents=True, exist_ok=True)
    if args.calib_cache == "fresh":
        return cache_dir, ("calibration cache fresh: emptied before every gpuprov run (each run "
                           "is a first process on this host)")
    res = run_speed(args.ciphers[0], 1048576, 32, 1, "gpuprov", 2, args.build, True,
                    args.openssl, cache_dir)
    files = cache_files(cache_dir)
    say("compare: priming the calibration cache (%s 1 MiB async 32, 2 s): %s" % (
        args.ciphers[0], ", ".join(f.name for f in files) if files else "nothing written"))
    if not files:
        return cache_dir, ("calibration cache warm requested, but the priming run wrote none "
                           "(no GPU reported under /proc/driver/nvidia/gpus, or no warm-up: %s)"
                           % (res["stderr"].strip().splitlines()[-1:] or ["no stderr"])[0])
    return cache_dir, ("calibration cache warm: primed by one unrecorded gpuprov run, so each run "
                       "routes from its first message with a measurement of this host")


def measure(args, host, configs, csv_path):
    runs = plan(args, configs)
    cache_dir, cache_note = prepare_cache(args, configs, csv_path.parent)
    if cache_note:
        say("compare: " + cache_note)
        args.notes.append(cache_note)
    today = datetime.date.today().isoformat()
    say("compare: %d runs (%s), %d s each; about %s" % (
        len(runs), ", ".join(configs), args.seconds, fmt_dur(len(runs) * (args.seconds + 0.3))))
    if not args.stats:
        verify_loading(args, configs)
    rows, default_rate = [], {}
    failures = 0
    t_start = time.monotonic()
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for k, (cipher, size, async_jobs, multi, config, rep) in enumerate(runs, 1):
            if args.calib_cache == "fresh" and config not in DEFAULTS:
                for f in cache_files(cache_dir):
                    f.unlink()
            res = run_speed(cipher, size, async_jobs, multi, config, args.seconds, args.build,
                            args.stats, args.openssl, cache_dir)
            problem = check_gpuprov(config, res, args.stats)
            if res["status"] != "ok" or problem:
                failures += 1
                tail = "\n".join(res["stderr"].strip().splitlines()[-5:])
                say("compare: ERROR %s %s %d B async=%d multi=%d: %s\n  command: %s\n  stderr: %s"
                    % (config, cipher, size, async_jobs, multi, problem or res["status"],
                       " ".join(res["cmd"]), tail))
                if problem and problem.startswith("no gpuprov stats line"):
                    say("compare: stopping: gpuprov did not load with OPENSSL_CONF=%s "
                        "OPENSSL_MODULES=%s%s; nothing it measures would be gpuprov"
                        % (ROOT / "config/gpuprov.cnf", args.build / "provider",
                           " LD_LIBRARY_PATH=%s" % args.openssl.libdir
                           if args.openssl.libdir else ""))
                    sys.exit(2)
            key = (cipher, size, async_jobs, multi, rep)
            if config == "default":
                default_rate[key] = res["bytes_per_s"]
            ref = default_rate.get(key)
            ratio = res["bytes_per_s"] / ref if ref else None
            gb = res["bytes"] / 1e9
            row = dict(host, date=today, cipher=cipher, size=size, async_jobs=async_jobs,
                       multi=multi, config=config, rep=rep, seconds=args.seconds,
                       status=("gpuprov-unused" if problem else res["status"]),
                       bytes_per_s="%.0f" % res["bytes_per_s"], ops=res["ops"],
                       bytes=res["bytes"], wall_s="%.3f" % res["wall_s"],
                       cpu_s="%.3f" % res["cpu_s"],
                       cpu_s_per_gb=("%.4f" % (res["cpu_s"] / gb)) if gb > 0 else "",
                       cores_busy="%.2f" % (res["cpu_s"] / res["wall_s"]),
                       ratio_vs_default=("%.3f" % ratio) if ratio is not None else "",
                       calib_cache=args.calib_cache if config not in DEFAULTS else "",
                       warm_open_ms=res["warm_open_ms"], warm_measure_ms=res["warm_measure_ms"],
                       note=problem or "")
            row.update(stats_fields(res["stats"]))
            w.writerow(row)
            fh.flush()
            rows.append(row)
            elapsed = time.monotonic() - t_start
            eta = elapsed / k * (len(runs) - k)
            cpu_gb = (" %s CPU s/GB" % row["cpu_s_per_gb"]) if row["cpu_s_per_gb"] else ""
            rtxt = (", %.2f\u00d7 default" % ratio) if ratio is not None and config != "default" else ""
            split = (" [%s, batch %s, messages routed gpu %s / cpu %s%s]" % (
                row.get("gp_split", ""), row.get("gp_mean_batch", ""), row.get("gp_routed_gpu", 0),
                row.get("gp_routed_cpu", 0),
                ", warm-up open %s ms" % row["warm_open_ms"] if row.get("warm_open_ms") else "")
                if row.get("gp_split") else "")
            say("[%d/%d] %s %d B async=%d multi=%d %s%s: %s,%s%s%s  ETA %s" % (
                k, len(runs), cipher, size, async_jobs, multi, config,
                " #%d" % rep if args.repeat > 1 else "",
                fmt_gbs(res["bytes_per_s"]), cpu_gb, rtxt, split, fmt_dur(eta)))
    say("compare: %d runs in %s; CSV: %s" % (len(runs), fmt_dur(time.monotonic() - t_start),
                                              csv_path))
    return rows, failures


def verify_loading(args, configs):
    """--no-stats: prove once per (cipher, gpuprov config) that gpuprov serves the cipher."""
    for config in configs:
        if config in DEFAULTS:
            continue
        for cipher in args.ciphers:
            res = run_speed(cipher, 1024, 0, 1, config, 1, args.build, True, args.openssl)
            problem = check_gpuprov(config, res, True)
            if problem or res["status"] != "ok":
                say("compare: ERROR verifying %s on %s: %s\n%s" % (
                    config, cipher, problem or res["status"], res["stderr"][-800:]))
                sys.exit(2)
    say("compare: verified that gpuprov serves every cipher in every gpuprov configuration")


# ---------------------------------------------------------------------------------------------
# Summary, tables, RESULTS.md

def aggregate(rows):
    """One row per (cipher, size, async, multi, config) over its repeats (CSV column rep; older
    CSVs have one run per cell): GB/s, CPU s/GB and cores busy are medians, the ratio is the
    median of the per-repeat ratios (each against the default run of the same repeat), with their
    range in ratio_min/ratio_max. On this class of host single 1-s runs of the same cell differ
    by up to ±25%, so one run cannot decide a 0.95x target."""
    groups = {}
    for r in rows:
        if r["status"] == "ok":
            k = (r["cipher"], int(r["size"]), int(r["async_jobs"]), int(r["multi"]), r["config"])
            groups.setdefault(k, []).append(r)
    out = {}
    for k, rs in groups.items():
        a = dict(rs[0])
        a["reps"] = len(rs)
        for f, fmt in (("bytes_per_s", "%.0f"), ("cpu_s_per_gb", "%.4f"), ("cores_busy", "%.2f")):
            v = [float(r[f]) for r in rs if r.get(f)]
            a[f] = fmt % median(v) if v else ""
        ratios = [float(r["ratio_vs_default"]) for r in rs if r.get("ratio_vs_default")]
        a["ratio_vs_default"] = "%.3f" % median(ratios) if ratios else ""
        a["ratio_min"] = min(ratios) if ratios else None
        a["ratio_max"] = max(ratios) if ratios else None
        a["routed_gpu_runs"] = sum(1 for r in rs if int(r.get("gp_routed_gpu") or 0) > 0)
        out[k] = a
    return out


def cell_label(k):
    """'1 MiB a32' for a cell key (cipher, size, async, multi, ...), with ' m16' where multi > 1."""
    return "%s a%d%s" % (size_label(k[1]), k[2], " m%d" % k[3] if k[3] != 1 else "")


def vs_best(ix, cipher, size, a, m):
    """gpuprov's default configuration against the better of the default provider and forced
    GPU in one cell (medians of the repeats); None where a configuration is missing."""
    g, d, c = (ix.get((cipher, size, a, m, cfg)) for cfg in ("gpuprov", "default", "gpuprov-cuda"))
    if not g or not d:
        return None
    best = max(float(d["bytes_per_s"]), float(c["bytes_per_s"]) if c else 0.0)
    return float(g["bytes_per_s"]) / best if best > 0 else None


def takeover(ix, cipher, a, m):
    """(smallest size where forced GPU beats the default provider, smallest size where gpuprov's
    default configuration routed a message to the GPU): None where there is none."""
    sizes = sorted({k[1] for k in ix if k[0] == cipher and k[2] == a and k[3] == m})
    gpu_wins = routed = None
    for size in sizes:
        d, c, g = (ix.get((cipher, size, a, m, cfg)) for cfg in ("default", "gpuprov-cuda", "gpuprov"))
        if gpu_wins is None and d and c and float(c["bytes_per_s"]) > float(d["bytes_per_s"]):
            gpu_wins = size
        if routed is None and g and g.get("routed_gpu_runs"):
            routed = size
    return gpu_wins, routed


def ratio_of(r):
    return float(r["ratio_vs_default"]) if r and r.get("ratio_vs_default") else None


def spread(r):
    """' (repeats 0.81-1.02)' for an aggregated row of several repeats, else ''."""
    if not r or r.get("reps", 1) < 2 or r.get("ratio_min") is None:
        return ""
    return " (repeats %.2f\u2013%.2f)" % (r["ratio_min"], r["ratio_max"])


def summary(rows):
    """(cells, cipher, gpuprov / default) rows: the headline cells of the comparison, each ratio a
    median with the range of its repeats. Figures only: what they mean for a user is in
    docs/performance.md."""
    ix = aggregate(rows)
    asyncs = sorted({int(r["async_jobs"]) for r in rows})
    multis = sorted({int(r["multi"]) for r in rows})
    big = max((int(r["size"]) for r in rows), default=0)
    out = []

    def fmt(r):
        x = ratio_of(r)
        return "%.2f\u00d7%s" % (x, spread(r)) if x is not None else "-"

    for cipher in [c for c in CIPHERS if any(r["cipher"] == c for r in rows)]:
        a, m = asyncs[-1], multis[0]
        meas = "hybrid " + fmt(ix.get((cipher, big, a, m, "gpuprov")))
        for cfg in FORCED:
            r = ix.get((cipher, big, a, m, cfg))
            if r is not None:
                meas += "; forced %s %s" % (FORCED[cfg], fmt(r))
        out.append(("%s B, async %d, -multi %d" % (big, a, m), PRETTY[cipher], meas))
    for cipher in [c for c in CIPHERS if any(r["cipher"] == c for r in rows)]:
        hy = [(ratio_of(r), k) for k, r in ix.items()
              if k[0] == cipher and k[4] == "gpuprov" and ratio_of(r) is not None]
        if not hy:
            continue
        worst, kw = min(hy)
        best, kb = max(hy)
        out.append(("every size, async, -multi (hybrid)", PRETTY[cipher],
                    "lowest %.2f\u00d7 at %d B async %d multi %d%s; highest %.2f\u00d7 at %d B "
                    "async %d multi %d%s; %d cells" % (worst, kw[1], kw[2], kw[3], spread(ix[kw]),
                                                      best, kb[1], kb[2], kb[3], spread(ix[kb]),
                                                      len(hy))))
    if len(multis) > 1:
        for cipher in [c for c in CIPHERS if any(r["cipher"] == c for r in rows)]:
            cells = ["async %d %s" % (a, fmt(ix.get((cipher, big, a, multis[-1], "gpuprov"))))
                     for a in asyncs if ix.get((cipher, big, a, multis[-1], "gpuprov"))]
            if cells:
                out.append(("%s B, -multi %d (hybrid)" % (big, multis[-1]), PRETTY[cipher],
                            "; ".join(cells)))
    # The target: gpuprov's default configuration against the better of the two others per cell.
    for cipher in [c for c in CIPHERS if any(r["cipher"] == c for r in rows)]:
        cells = sorted((vs_best(ix, *k[:4]), k) for k in ix
                       if k[0] == cipher and k[4] == "gpuprov" and vs_best(ix, *k[:4]) is not None)
        if not cells:
            continue
        low = [(x, k) for x, k in cells if x < TARGET_VS_BEST]
        out.append(("gpuprov / best of (default, forced GPU), every cell", PRETTY[cipher],
                    "%d of %d cells >= %.1f\u00d7; lowest %.2f\u00d7 at %s%s" % (
                        len(cells) - len(low), len(cells), TARGET_VS_BEST, cells[0][0],
                        cell_label(cells[0][1]),
                        ("; below: " + ", ".join("%s %.2f" % (cell_label(k), x) for x, k in low))
                        if low else "")))
    # Where the GPU takes over: forced GPU against the default provider, and gpuprov's routing.
    for cipher in [c for c in CIPHERS if any(r["cipher"] == c for r in rows)]:
        parts = []
        for a in asyncs:
            wins, routed = takeover(ix, cipher, a, multis[0])
            parts.append("async %d: forced GPU faster from %s, gpuprov routes to the GPU from %s" % (
                a, size_label(wins) if wins else "no size", size_label(routed) if routed else "no size"))
        out.append(("GPU takes over (-multi %d)" % multis[0], PRETTY[cipher], "; ".join(parts)))
    # CPU cost: user+sys seconds per GB of every configuration at the largest size and async.
    for cipher in [c for c in CIPHERS if any(r["cipher"] == c for r in rows)]:
        a = asyncs[-1]
        cells = []
        for cfg in KNOWN_CONFIGS:
            r = ix.get((cipher, big, a, multis[0], cfg))
            if r and r["cpu_s_per_gb"]:
                cells.append("%s %.3f" % (cfg, float(r["cpu_s_per_gb"])))
        if cells:
            out.append(("CPU s/GB, %s B, async %d, -multi %d" % (big, a, multis[0]), PRETTY[cipher],
                        ", ".join(cells)))
    return out


def ratio_table(rows):
    """Markdown: per cipher x size and per (async, multi): the default provider's GB/s, gpuprov's
    default configuration and forced configurations against it, and gpuprov against the better
    of the default provider and forced GPU (the target's column)."""
    ix = aggregate(rows)
    combos = sorted({(int(r["multi"]), int(r["async_jobs"])) for r in rows})
    forced = [c for c in FORCED if any(r["config"] == c and r["status"] == "ok" for r in rows)]
    aa = any(r["config"] == "default-aa" and r["status"] == "ok" for r in rows)
    head = ["cipher", "size"]
    for m, a in combos:
        tag = "a%d m%d" % (a, m)
        head += ["default GB/s %s" % tag, "gpuprov %s" % tag] + (["A/A %s" % tag] if aa else [])
        head += ["%s %s" % (c.replace("gpuprov-", ""), tag) for c in forced]
        if "gpuprov-cuda" in forced:
            head.append("vs best %s" % tag)
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for cipher in [c for c in CIPHERS if any(r["cipher"] == c for r in rows)]:
        for size in sorted({int(r["size"]) for r in rows if r["cipher"] == cipher}):
            cells = [PRETTY[cipher], size_label(size)]
            for m, a in combos:
                d = ix.get((cipher, size, a, m, "default"))
                cells.append("%.3f" % (float(d["bytes_per_s"]) / 1e9) if d else "-")
                g = ix.get((cipher, size, a, m, "gpuprov"))
                x = ratio_of(g)
                cells.append(("%.2f%s" % (x, "*" if g and g.get("routed_gpu_runs") else ""))
                             if x is not None else "-")
                if aa:
                    x = ratio_of(ix.get((cipher, size, a, m, "default-aa")))
                    cells.append("%.2f" % x if x is not None else "-")
                for c in forced:
                    x = ratio_of(ix.get((cipher, size, a, m, c)))
                    cells.append("%.2f" % x if x is not None else "-")
                if "gpuprov-cuda" in forced:
                    x = vs_best(ix, cipher, size, a, m)
                    cells.append(("**%.2f**" if x is not None and x < TARGET_VS_BEST else "%.2f") % x
                                 if x is not None else "-")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(rows):
    """Markdown: CPU s/GB at 16 KiB and the smallest size, one process, per config and async."""
    ix = aggregate(rows)
    sizes = sorted({int(r["size"]) for r in rows})
    pick = sorted({sizes[0], sizes[-1]} | {x for x in (1024, 16384, 1048576) if x in sizes})
    configs = [c for c in KNOWN_CONFIGS if any(r["config"] == c for r in rows)]
    asyncs = sorted({int(r["async_jobs"]) for r in rows})
    head = ["cipher", "size", "async"] + ["%s CPU s/GB (cores busy)" % c for c in configs]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|" + "---:|" * len(configs)]
    for cipher in [c for c in CIPHERS if any(r["cipher"] == c for r in rows)]:
        for size in pick:
            for a in asyncs:
                cells = []
                for c in configs:
                    r = ix.get((cipher, size, a, 1, c))
                    cells.append("%.3f (%s)" % (float(r["cpu_s_per_gb"]), r["cores_busy"])
                                 if r and r["cpu_s_per_gb"] else "-")
                if any(x != "-" for x in cells):
                    lines.append("| %s | %d | %d | %s |" % (PRETTY[cipher], size, a,
                                                            " | ".join(cells)))
    return "\n".join(lines)


def results_section(rows, meta, plots, plot_note, results_path):
    has_gpu = meta["gpu"] != "none"
    rel = lambda p: os.path.relpath(p, results_path.parent)
    dev = meta["gpu"] if has_gpu else "no GPU"
    ok = [r for r in rows if r["status"] == "ok"]
    configs = [c for c in KNOWN_CONFIGS if any(r["config"] == c for r in rows)]
    s = [BEGIN,
         "## openssl speed against the default provider (bench/compare)", "",
         "Written by `bench/compare` from one run; do not edit between the markers (the next run "
         "replaces it). Device: **%s**; host CPU: %s, %d cores; %s; gpuprov %s; %s." % (
             meta["gpu"] if has_gpu else "none (no GPU on this host)", meta["host_cpu"],
             meta["cores"], short_version(meta["openssl"]), meta["gpuprov_commit"],
             meta["date"]), "",
         "Command: `%s` (%s; %d runs, %s; load average %s)." % (
             meta["command"], meta.get("duration", "?"), len(rows),
             "all ok" if len(ok) == len(rows) else "%d failed" % (len(rows) - len(ok)),
             meta.get("load", "not recorded")), ""]
    if meta.get("note"):
        s += [meta["note"], ""]
    if not has_gpu:
        s += ["**No GPU on this host**: `gpuprov` (backend=auto) is passthrough (the default "
              "provider's own functions under gpuprov's names), `gpuprov-cuda` is dropped, and the "
              "figures say nothing about the GPU. They say what loading gpuprov costs on a GPU-less "
              "machine; the GPU figures come from the same command on a GPU host.", ""]
    reps = max((int(r["rep"]) for r in rows if r.get("rep")), default=1)
    s += [("Each cell ran %d times, the configurations interleaved within each repeat; figures "
           "are medians, a ratio is the median of the per-repeat ratios (each against the default "
           "run of the same repeat), with the range of the repeats in the summary. "
           % reps if reps > 1 else "") +
          "A run is one `openssl speed -mr -elapsed -seconds %s -bytes N [-async_jobs A] "
          "[-multi M] -evp CIPHER` process; GB/s = 10^9 bytes/s as speed reports it (with "
          "-multi, the sum over processes); CPU s/GB = user+sys seconds of the whole process tree "
          "(getrusage, start-up included) per 10^9 bytes encrypted; cores busy = CPU s / wall s. "
          "Ratios are against the default provider in the same cell of the same compare run. "
          "Configurations: %s." % (rows[0]["seconds"] if rows else "?", ", ".join(configs)), "",
          "### Summary (%s)" % dev, "",
          "gpuprov / default in the same cell; above 1 gpuprov is faster.", "",
          "| cells | cipher | gpuprov / default |", "|---|---|---|"]
    for t in summary(rows):
        s.append("| %s |" % " | ".join(t))
    s += ["", "### By cell: gpuprov and forced executors / default, and gpuprov / the better of "
          "default and forced GPU", "",
          "Ratios against the default provider of the same cell (median of the repeats); `*`: "
          "gpuprov's default configuration routed messages to the GPU in at least one repeat; "
          "\"vs best\": gpuprov / max(default, forced GPU), bold below %.1f." % TARGET_VS_BEST, "",
          ratio_table(rows), "",
          "### CPU seconds per GB, one process", "", cpu_table(rows), ""]
    if plots:
        s += ["### Plots", ""]
        s += ["![%s](%s)" % (Path(p).stem, rel(p)) for p in plots]
        s.append("")
    else:
        s += ["Plots: %s" % plot_note, ""]
    s += ["CSV: `%s` (one row per run, with the gpuprov stats of each: ops, batches, mean batch, "
          "executor split)." % rel(meta["csv"]), END]
    return "\n".join(wrap_prose(x) for x in s) + "\n"


def update_results(path, section):
    write_section(path, BEGIN, END, section)


# ---------------------------------------------------------------------------------------------
# Plots

def size_label(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    return "%d KiB" % (n // 1024) if n >= 1024 and n % 1024 == 0 else "%d B" % n


def minor_label(v, _pos):
    """Log-axis minor ticks: label the 2s and 5s of each decade."""
    lead = v / 10 ** math.floor(math.log10(v)) if v > 0 else 0
    return "%g" % v if round(lead) in (2, 5) else ""


def draw_plots(rows, meta, outdir, keep_existing=False):
    """Throughput and CPU s/GB against message size, one PNG each per cipher, a panel per
    -multi, a line per (configuration, async_jobs). Returns (paths, note). keep_existing (with
    --plot-only): where matplotlib is missing, link the PNGs already in outdir, which an earlier
    run drew from the same CSV."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, NullLocator
    except ImportError:
        old = [outdir / ("%s-%s.png" % (what, c)) for c in CIPHERS
               if any(r["cipher"] == c for r in rows) for what in ("throughput", "cpu")]
        if keep_existing and old and all(p.is_file() for p in old):
            return old, "kept (matplotlib is not importable here; drawn earlier from this CSV)"
        return [], ("skipped (matplotlib is not importable here). Draw them later with "
                    "`bench/compare --plot-only %s` where it is (see `bench/compare --help` for "
                    "installing it from wheels without network)." % meta["csv"])
    colors = {"default": "black", "default-aa": "tab:gray", "gpuprov": "tab:blue", "gpuprov-cuda": "tab:green",
              "gpuprov-host": "tab:orange", "gpuprov-cpu": "tab:purple"}
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D"]
    ix = aggregate(rows)
    ok = list(ix.values())   # one point per cell: the median of its repeats
    asyncs = sorted({int(r["async_jobs"]) for r in ok})
    multis = sorted({int(r["multi"]) for r in ok})
    sizes = sorted({int(r["size"]) for r in ok})
    dev = meta["gpu"] if meta["gpu"] != "none" else "no GPU"
    paths = []
    for cipher in [c for c in CIPHERS if any(r["cipher"] == c for r in ok)]:
        for what, field, scale, ylabel in (
                ("throughput", "bytes_per_s", 1e-9, "GB/s (10^9 bytes/s)"),
                ("cpu", "cpu_s_per_gb", 1.0, "CPU seconds per GB (whole process)")):
            fig, axes = plt.subplots(1, len(multis), figsize=(max(8.5, 6.2 * len(multis)), 4.8),
                                     squeeze=False, sharey=True)
            for ax, m in zip(axes[0], multis):
                for config in [c for c in KNOWN_CONFIGS if any(r["config"] == c for r in ok)]:
                    for i, a in enumerate(asyncs):
                        pts = sorted((int(r["size"]), float(r[field]) * scale) for r in ok
                                     if r["cipher"] == cipher and r["config"] == config
                                     and int(r["async_jobs"]) == a and int(r["multi"]) == m
                                     and r[field] != "")
                        if not pts:
                            continue
                        ax.plot([p[0] for p in pts], [p[1] for p in pts],
                                color=colors.get(config, "gray"),
                                linestyle=styles[i % len(styles)],
                                marker=markers[i % len(markers)], markersize=4,
                                label="%s async=%d" % (config, a))
                        if config == "gpuprov" and field == "bytes_per_s":
                            routed = [p for p in pts if (ix.get((cipher, p[0], a, m, config)) or {})
                                      .get("routed_gpu_runs")]
                            if routed:
                                ax.scatter([p[0] for p in routed], [p[1] for p in routed], s=70,
                                           facecolors="none", edgecolors="tab:red", zorder=5,
                                           label="gpuprov async=%d: routed to the GPU" % a)
                # Where the GPU takes over: forced GPU faster than the default provider from here.
                for i, a in enumerate(asyncs):
                    wins, _ = takeover(ix, cipher, a, m)
                    if wins:
                        ax.axvline(wins, color="tab:green", linestyle=styles[i % len(styles)],
                                   alpha=0.6, linewidth=1,
                                   label="forced GPU faster from %s (async=%d)" % (size_label(wins), a))
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_xticks(sizes, [size_label(x) for x in sizes])
                ax.xaxis.set_minor_locator(NullLocator())
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
                ax.yaxis.set_minor_formatter(FuncFormatter(minor_label))
                ax.set_xlabel("message size (bytes)")
                ax.set_title("-multi %d" % m)
                ax.grid(True, which="both", alpha=0.3)
                ax.legend(fontsize=7)
            axes[0][0].set_ylabel(ylabel)
            fig.suptitle("%s, openssl speed: %s\n%s, %s cores (%s), %s, gpuprov %s, %s" % (
                PRETTY[cipher], "throughput" if what == "throughput" else "CPU cost",
                dev, meta["cores"], meta["host_cpu"], short_version(meta["openssl"]),
                meta["gpuprov_commit"], meta["date"]), fontsize=9)
            fig.tight_layout()
            p = outdir / ("%s-%s.png" % (what, cipher))
            fig.savefig(p, dpi=90)
            plt.close(fig)
            paths.append(p)
    return paths, "drawn"


# ---------------------------------------------------------------------------------------------

def report(rows, meta, outdir, results_path, keep_plots=False):
    plots, note = draw_plots(rows, meta, outdir, keep_plots)
    if results_path:
        update_results(results_path, results_section(rows, meta, plots, note, results_path))
    say("compare: plots: %s" % (", ".join(str(p) for p in plots) if plots else note))
    if results_path:
        say("compare: %s updated (between %s and %s)" % (results_path, BEGIN, END))
    has_gpu = meta["gpu"] != "none"
    say("\nSummary (gpuprov / default in the same run; device: %s):"
        % (meta["gpu"] if has_gpu else "none, no GPU on this host"))
    t = summary(rows)
    w = [max(len(x[i]) for x in t) for i in range(2)] if t else [0, 0]
    for x in t:
        say("  %-*s  %-*s  %s" % (w[0], x[0], w[1], x[1], x[2]))


def main():
    ap = argparse.ArgumentParser(
        prog="bench/compare", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Plots need matplotlib. On a host without it and without network, carry wheels: "
               "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "
               "--target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site")
    ap.add_argument("--build", type=Path, default=ROOT / "build",
                    help="meson build dir holding provider/gpuprov.so (default: build)")
    ap.add_argument("--out", type=Path, help="where CSV and PNGs go (default: bench/plots; "
                    "with --quick: <build>/compare-quick)")
    ap.add_argument("--results", type=Path, help="RESULTS.md whose compare section to replace "
                    "(default: bench/RESULTS.md; with --quick: none)")
    ap.add_argument("--no-results", action="store_true", help="leave RESULTS.md alone")
    ap.add_argument("--seconds", type=int, default=1, help="seconds per run (default 1)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell and configuration, "
                    "interleaved; tables take medians (default 3; --quick: 1)")
    ap.add_argument("--ciphers", type=csv_list(str), default=CIPHERS)
    ap.add_argument("--sizes", type=csv_list(int), default=SIZES)
    ap.add_argument("--async", dest="asyncs", type=csv_list(int), default=ASYNC,
                    help="-async_jobs values (0 = synchronous); default 0,32")
    ap.add_argument("--multi", type=csv_list(int), default=MULTI, help="default 1 (e.g. 1,16)")
    ap.add_argument("--configs", type=csv_list(str), default=["default", "gpuprov", "gpuprov-cuda"],
                    help="of %s (default: default,gpuprov,gpuprov-cuda; gpuprov-cuda is dropped "
                    "without a GPU)" % ",".join(KNOWN_CONFIGS))
    ap.add_argument("--aa", action="store_true",
                    help="add default-aa: the default provider run again in every cell, its ratio to "
                    "the first default run (the A/A column) beside gpuprov's")
    ap.add_argument("--forced-everywhere", action="store_true",
                    help="run forced executors in every cell, not only at the largest "
                    "async_jobs with -multi 1")
    ap.add_argument("--no-stats", dest="stats", action="store_false",
                    help="measure without GPUPROV_STATS (its counters cost a few locked "
                    "instructions per request); gpuprov's use is then checked once per cipher")
    ap.add_argument("--quick", action="store_true",
                    help="sizes 16,16384,1048576, async 0,32, multi 1, one repeat (~2 minutes on a GPU host)")
    ap.add_argument("--openssl", type=Path, metavar="PREFIX", help=OPENSSL_HELP)
    ap.add_argument("--calib-cache", choices=["warm", "fresh", "user"], default="warm",
                    help="gpuprov's persisted measurements: warm (default): a directory of the "
                    "comparison's own, primed by one unrecorded run, so runs route as a second "
                    "process on this host does; fresh: emptied before every gpuprov run (a first "
                    "process); user: the user's own (GPUPROV_CALIB_CACHE or ~/.cache/gpuprov)")
    ap.add_argument("--note", default="", help="a sentence for the RESULTS section (with "
                    "--plot-only: put before the recorded notes)")
    ap.add_argument("--plot-only", type=Path, metavar="CSV",
                    help="draw plots and rewrite the RESULTS section from an earlier CSV")
    args = ap.parse_args()

    if args.plot_only:
        csv_path = args.plot_only.resolve()
        rows = list(csv.DictReader(open(csv_path)))
        if not rows:
            sys.exit("compare: %s has no rows" % csv_path)
        meta_path = csv_path.with_suffix(".json")
        meta = json.load(open(meta_path)) if meta_path.exists() else {
            k: rows[0][k] for k in ("date", "host_cpu", "gpu", "openssl", "gpuprov_commit")}
        meta.setdefault("cores", rows[0].get("cores", "?"))
        meta.setdefault("command", "bench/compare (command not recorded)")
        meta["cores"] = int(meta["cores"]) if str(meta["cores"]).isdigit() else meta["cores"]
        meta["csv"] = str(csv_path)
        if args.note:
            meta["note"] = (args.note + " " + meta.get("note", "")).strip()
        outdir = (args.out or csv_path.parent).resolve()
        outdir.mkdir(parents=True, exist_ok=True)
        results = None if args.no_results else (args.results or ROOT / "bench" / "RESULTS.md")
        report(rows, meta, outdir, results, keep_plots=True)
        return 0

    if args.quick:
        args.sizes, args.asyncs, args.multi, args.repeat = QUICK_SIZES, [0, 32], [1], 1
    args.sizes, args.asyncs, args.multi = (sorted(set(x)) for x in (args.sizes, args.asyncs,
                                                                     args.multi))
    args.ciphers = list(dict.fromkeys(args.ciphers))
    args.build = args.build.resolve()
    bad = [c for c in args.configs if c not in KNOWN_CONFIGS] + \
          [c for c in args.ciphers if c not in CIPHERS]
    if bad:
        sys.exit("compare: unknown configuration or cipher: %s" % ", ".join(bad))
    if not (args.build / "provider" / "gpuprov.so").is_file():
        sys.exit("compare: %s not built (meson setup build && ninja -C build)"
                 % (args.build / "provider" / "gpuprov.so"))
    outdir = (args.out or (args.build / "compare-quick" if args.quick
                           else ROOT / "bench" / "plots")).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    results = None
    if not args.no_results and (args.results or not args.quick):
        results = (args.results or ROOT / "bench" / "RESULTS.md").resolve()

    args.openssl = OpenSSL(args.openssl)
    host = host_info(args.openssl)
    configs = list(dict.fromkeys(args.configs + (["default-aa"] if args.aa else [])))
    warnings = args.openssl.warnings(args.build)
    notes = list(warnings)
    if args.openssl.prefix:
        notes.append("OpenSSL from %s (%s with LD_LIBRARY_PATH=%s)" % (
            args.openssl.prefix, args.openssl.bin, args.openssl.libdir))
    if host["gpu"] == "none" and "gpuprov-cuda" in configs:
        configs.remove("gpuprov-cuda")
        notes.append("no GPU on this host (nvidia-smi finds none): gpuprov-cuda dropped; "
                     "gpuprov (backend=auto) is passthrough")
    if max(args.multi) > host["cores"]:
        notes.append("-multi %d on %d cores: the processes share the cores"
                     % (max(args.multi), host["cores"]))
    if not become_subreaper():
        notes.append("could not become a child subreaper: -multi CPU time relies on speed "
                     "reaping its children")
    knobs = sorted("%s=%s" % kv for kv in os.environ.items()
                   if kv[0].startswith("GPUPROV_") and kv[0] not in (
                       "GPUPROV_BACKEND", "GPUPROV_STATS")
                   and not (kv[0] == "GPUPROV_CALIB_CACHE" and args.calib_cache != "user"))
    if knobs:
        notes.append("gpuprov knobs from the environment: " + " ".join(knobs))
    say("compare: %s | CPU: %s (%d cores) | GPU: %s | gpuprov %s" % (
        host["openssl"], host["host_cpu"], host["cores"], host["gpu"], host["gpuprov_commit"]))
    for n in notes:
        say("compare: %s: %s" % ("WARNING" if n in warnings else "note", n))

    args.notes = notes
    csv_path = outdir / "compare.csv"
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    rows, failures = measure(args, host, configs, csv_path)
    meta = dict(host, date=datetime.date.today().isoformat(), csv=str(csv_path),
                load="%.1f at the start, %.1f at the end" % (load0, os.getloadavg()[0]),
                command=" ".join(["bench/compare"] + [shlex.quote(a) for a in sys.argv[1:]]),
                duration=fmt_dur(time.monotonic() - t0),
                note=" ".join(([args.note] if args.note else [])
                              + (["Notes: " + "; ".join(notes) + "."] if notes else [])))
    json.dump(dict(meta, csv=os.path.relpath(csv_path, ROOT)),
              open(csv_path.with_suffix(".json"), "w"), indent=1)
    report(rows, meta, outdir, results)
    if failures:
        say("compare: %d run(s) failed or bypassed gpuprov (see ERROR lines and the CSV's "
            "status column)" % failures)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
