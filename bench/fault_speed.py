#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""openssl speed with a GPU failure mid-run, against the cpu executor: what a GPU failure costs.

Per cell (cipher x size x async jobs) three runs, interleaved, each repeat in turn:
  cpu    GPUPROV_BACKEND=cpu
  cuda   GPUPROV_BACKEND=cuda, no fault
  fault  GPUPROV_BACKEND=cuda, and every CUDA call fails from --fault-ms after the GPU opened (the
         test module's fault schedule, batching/cuda_fault.h: GPUPROV_TEST_CUDA_FAULT_CALL=any,
         _TIMES=0, _AT_MS), as when the GPU is taken away mid-run
all through the test module (build/provider/test-module, which alone has the fault hooks; the
same code as the production module otherwise) loaded by config/gpuprov.cnf, one
`openssl speed -mr -elapsed -seconds S -bytes N [-async_jobs A] -evp CIPHER` process each
(-elapsed: speed divides by wall time, not by its process's user CPU time). Reported per cell,
medians of the repeats: GB/s of each, fault/cpu and cuda/cpu (medians of per-repeat ratios), the
rate after the fault estimated from the two cuda runs, after/cpu = (F*T - G*t) / (T - t) / C
(F, G: the fault and no-fault rates, T: speed's timed seconds, t: the fault's time), and each
run's wall time; the fault run's gpuprov line and stats say where the work went.

Without a GPU, --stand-in host runs the same logic in CI conditions: the "cuda" runs are the
hybrid policy with the host executor as its GPU side (every message sent there), and the fault is
the test hook GPUPROV_TEST_HOST_FAIL_AFTER (the host executor fails one batch, --fail-after).

usage (GPU host, one command; builds build-gpu with -Dcuda=enabled if needed):
  python3 bench/fault_speed.py
  python3 bench/fault_speed.py --stand-in host --build build --sizes 1048576 --repeats 1 --seconds 1
Writes a CSV (--csv, default BUILD/bench/fault_speed.csv); prints the table last.
"""

import argparse
import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

ROOT = benchlib.ROOT
MODES = ("cpu", "cuda", "fault")


def build_module(build, stand_in, no_build):
    """The test module of `build`, configured and built here if needed."""
    if not no_build:
        if not (build / "build.ninja").exists():
            args = ["meson", "setup", str(build)] + ([] if stand_in else ["-Dcuda=enabled"])
            subprocess.run(args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", str(build), "provider/test-module/gpuprov.so"], check=True,
                       stdout=subprocess.DEVNULL)
    mod = build / "provider" / "test-module"
    if not (mod / "gpuprov.so").exists():
        sys.exit("fault_speed: %s/gpuprov.so not built" % mod)
    return mod


def mode_env(mode, args, moddir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")}
    env.update({"OPENSSL_CONF": str(ROOT / "config" / "gpuprov.cnf"), "OPENSSL_MODULES": str(moddir),
                "GPUPROV_STATS": "1", "GPUPROV_CALIB_CACHE": "off"})
    if mode == "cpu":
        env["GPUPROV_BACKEND"] = "cpu"
    elif args.stand_in == "host":
        # The hybrid policy with the host executor as its GPU: every message goes there.
        env.update({"GPUPROV_BACKEND": "hybrid", "GPUPROV_HYBRID_GPU": "host", "GPUPROV_MIN_GPU_BYTES": "0",
                    "GPUPROV_LONE_GPU_BYTES": "0", "GPUPROV_GPU_SHARE": "1"})
        if mode == "fault":
            env["GPUPROV_TEST_HOST_FAIL_AFTER"] = str(args.fail_after)
    else:
        env["GPUPROV_BACKEND"] = "cuda"
        if args.device is not None:
            env["GPUPROV_DEVICE"] = args.device
        if mode == "fault":
            env.update({"GPUPROV_TEST_CUDA_FAULT_CALL": "any", "GPUPROV_TEST_CUDA_FAULT_TIMES": "0",
                        "GPUPROV_TEST_CUDA_FAULT_AT_MS": str(args.fault_ms)})
            if args.fault_device is not None:
                env["GPUPROV_TEST_CUDA_FAULT_DEVICE"] = args.fault_device
    return env


def run_one(cipher, size, jobs, mode, args, moddir):
    cmd = ["openssl", "speed", "-mr", "-elapsed", "-seconds", str(args.seconds), "-bytes", str(size)]
    if jobs > 0:
        cmd += ["-async_jobs", str(jobs)]
    cmd += ["-evp", cipher]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=mode_env(mode, args, moddir), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    status = "ok"
    try:
        out, err = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = "timeout"
    wall = time.monotonic() - t0
    rates = [float(line.split(":")[3]) for line in out.splitlines() if line.startswith("+F:")]
    timed = [float(line.split(":")[3]) for line in err.splitlines() if line.startswith("+R:")]
    if status == "ok" and (not rates or proc.returncode != 0):
        status = "no-figures" if not rates else "exit-%d" % proc.returncode
    lines = [line for line in err.splitlines() if line.startswith("gpuprov: ")]
    failed = [line for line in lines if " failed" in line]
    return {"status": status, "wall_s": wall, "bytes_per_s": rates[-1] if rates else 0.0,
            "timed_s": timed[-1] if timed else float(args.seconds), "stats": benchlib.parse_stats(err) or {},
            "fault_line": failed[0] if failed else "", "other_lines": [x for x in lines if x not in failed],
            "stderr_tail": err.strip().splitlines()[-3:]}


def after_ratio(f, g, c, timed_s, t_fault):
    """The rate after the fault over the cpu rate, from the fault run's average f and the no-fault
    run's g (taken as the rate before the fault): (f*T - g*t) / (T - t) / c."""
    if c <= 0 or t_fault is None or timed_s <= t_fault + 0.05:
        return None
    return (f * timed_s - g * t_fault) / (timed_s - t_fault) / c


def fmt(x, spec="%.2f"):
    return "-" if x is None else spec % x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=None, help="build directory (default build-gpu; build with --stand-in)")
    ap.add_argument("--no-build", action="store_true", help="use the build as it is")
    ap.add_argument("--ciphers", type=benchlib.csv_list(str),
                    default=["aes-256-gcm", "aes-128-ctr", "chacha20-poly1305"])
    ap.add_argument("--sizes", type=benchlib.csv_list(int), default=[1048576, 16777216])
    ap.add_argument("--async-jobs", type=benchlib.csv_list(int), default=[0, 32])
    ap.add_argument("--seconds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fault-ms", type=int, default=1000,
                    help="the CUDA fault from this many ms after the GPU opened (default 1000: mid-run)")
    ap.add_argument("--device", default=None, help="GPUPROV_DEVICE for the cuda runs (e.g. all)")
    ap.add_argument("--fault-device", default=None, help="only this GPU fails (with --device all)")
    ap.add_argument("--stand-in", choices=["host"], default=None,
                    help="no GPU: the host executor plays the GPU and fails by the test hook")
    ap.add_argument("--fail-after", type=int, default=2, help="--stand-in host: good batches before the failure")
    ap.add_argument("--timeout", type=int, default=180, help="seconds before a run counts as hung")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()

    build = Path(args.build or ("build" if args.stand_in else "build-gpu"))
    if not build.is_absolute():
        build = ROOT / build
    moddir = build_module(build, args.stand_in, args.no_build)
    host = benchlib.host_info()
    if args.stand_in is None and host["gpu"] == "none":
        sys.exit("fault_speed: no GPU here (nvidia-smi); --stand-in host runs the logic without one")
    t_fault = None if args.stand_in else args.fault_ms / 1000.0
    cells = [(c, s, a) for c in args.ciphers for s in args.sizes for a in args.async_jobs]
    fault_what = ("host executor fails after %d batches (GPUPROV_TEST_HOST_FAIL_AFTER)" % args.fail_after
                  if args.stand_in else "every CUDA call fails from %d ms after the opening" % args.fault_ms)
    benchlib.say("fault_speed: %s | %s | %s (%d cores) | gpuprov %s | %d cells x %d modes x %d repeats, %d s each;"
                 " fault: %s" % (benchlib.short_version(host["openssl"]), host["gpu"], host["host_cpu"],
                                 host["cores"], host["gpuprov_commit"], len(cells), len(MODES), args.repeats,
                                 args.seconds, fault_what))
    res = {}
    total, k, t_start = len(cells) * len(MODES) * args.repeats, 0, time.monotonic()
    for rep in range(args.repeats):
        for cell in cells:
            for mode in MODES:   # interleaved: each repeat of a cell runs its three modes back to back
                r = run_one(*cell, mode, args, moddir)
                res.setdefault(cell, {}).setdefault(mode, []).append(r)
                k += 1
                benchlib.say("  [%d/%d] %s %d async %d %s: %.2f GB/s, wall %.1f s%s%s" % (
                    k, total, cell[0], cell[1], cell[2], mode, r["bytes_per_s"] / 1e9, r["wall_s"],
                    "" if r["status"] == "ok" else " (%s: %s)" % (r["status"], " / ".join(r["stderr_tail"])),
                    " | " + r["fault_line"] if r["fault_line"] else ""))
    benchlib.say("fault_speed: %d runs in %s" % (total, benchlib.fmt_dur(time.monotonic() - t_start)))

    csv_path = Path(args.csv) if args.csv else build / "bench" / "fault_speed.csv"
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(csv_path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["cipher", "size", "async_jobs", "repeat", "mode", "status", "bytes_per_s", "timed_s", "wall_s",
                    "cuda_ops", "host_ops", "cpu_ops", "fallbacks", "errors", "fault_line"])
        for cell, modes in res.items():
            for mode in MODES:
                for i, r in enumerate(modes[mode]):
                    st = r["stats"]
                    w.writerow([*cell, i + 1, mode, r["status"], "%.0f" % r["bytes_per_s"], "%.3f" % r["timed_s"],
                                "%.2f" % r["wall_s"], st.get("cuda_ops", 0), st.get("host_ops", 0),
                                st.get("cpu_ops", 0), st.get("fallbacks", 0), st.get("errors", 0),
                                r["fault_line"]])
    for cell, modes in res.items():
        c, g, f = (modes[m] for m in MODES)
        reps = range(len(c))
        ok = all(x[i]["status"] == "ok" for x in (c, g, f) for i in reps)
        ratio = [f[i]["bytes_per_s"] / c[i]["bytes_per_s"] for i in reps if c[i]["bytes_per_s"] > 0]
        gratio = [g[i]["bytes_per_s"] / c[i]["bytes_per_s"] for i in reps if c[i]["bytes_per_s"] > 0]
        after = [after_ratio(f[i]["bytes_per_s"], g[i]["bytes_per_s"], c[i]["bytes_per_s"], f[i]["timed_s"], t_fault)
                 for i in reps]
        after = [a for a in after if a is not None]
        seen = sum(1 for x in f if x["fault_line"])
        gpu_key = "host_ops" if args.stand_in else "cuda_ops"
        idle = sum(1 for x in g if x["stats"].get(gpu_key, 0) == 0)
        host_share = [x["stats"].get("host_ops", 0) / x["stats"]["ops"] for x in f if x["stats"].get("ops")]
        rows.append({
            "cell": "%-17s %5s %2d" % (cell[0], "%dM" % (cell[1] >> 20) if cell[1] >= 1 << 20 else str(cell[1]),
                                        cell[2]),
            "cpu": benchlib.median([x["bytes_per_s"] for x in c]) / 1e9,
            "cuda": benchlib.median([x["bytes_per_s"] for x in g]) / 1e9,
            "fault": benchlib.median([x["bytes_per_s"] for x in f]) / 1e9,
            "f/c": benchlib.median(ratio) if ratio else None,
            "g/c": benchlib.median(gratio) if gratio else None,
            "after": benchlib.median(after) if after else None,
            "wall": tuple(benchlib.median([x["wall_s"] for x in m]) for m in (c, g, f)),
            "host": 100.0 * benchlib.median(host_share) if host_share else None,
            "note": ("" if ok else "failed runs (CSV) ") + ("" if seen == len(f) else "fault seen %d/%d " % (seen, len(f)))
                    + ("" if idle == 0 else "GPU idle in %d no-fault run(s)" % idle),
        })
    line = next((x["fault_line"] for m in res.values() for x in m["fault"] if x["fault_line"]), "")
    benchlib.say()
    benchlib.say("CSV: %s" % csv_path)
    if line:
        benchlib.say("a fault run's line: %s" % line)
    benchlib.say()
    benchlib.say("medians of %d repeat(s); GB/s by openssl speed -elapsed; after/cpu: the rate after the fault, "
                 "estimated%s; wall: seconds per run (speed -seconds %d); host: share of the fault run's requests "
                 "on the host executor" % (args.repeats, "" if t_fault is not None else " (n/a: the stand-in fails by "
                                                                                       "batch count)", args.seconds))
    head = "%-26s %7s %7s %7s %9s %9s %9s %18s %6s  %s" % ("cipher size async", "cpu", "cuda", "fault", "fault/cpu",
                                                        "cuda/cpu", "after/cpu", "wall cpu/cuda/flt", "host", "")
    benchlib.say(head)
    for r in rows:
        benchlib.say("%-26s %7.2f %7.2f %7.2f %9s %9s %9s %18s %6s  %s" % (
            r["cell"], r["cpu"], r["cuda"], r["fault"], fmt(r["f/c"]), fmt(r["g/c"]), fmt(r["after"]),
            "%.1f/%.1f/%.1f" % r["wall"], fmt(r["host"], "%.0f%%"), r["note"]))


if __name__ == "__main__":
    main()
