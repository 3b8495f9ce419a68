# SPDX-License-Identifier: Apache-2.0
"""What bench/compare.py and bench/tax.py share: host facts, gpuprov's stats line, medians,
durations, and the writer of a marked section of bench/RESULTS.md (standard library only)."""

import os
import re
import subprocess
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def say(msg=""):
    print(msg, flush=True)


def csv_list(kind):
    """argparse type: "a,b,c" -> [kind(a), kind(b), kind(c)]."""
    return lambda s: [kind(x.strip()) for x in s.split(",") if x.strip() != ""]


def sh(cmd):
    """stdout of a command, stripped; "" when it cannot run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def host_info():
    """CPU model, usable cores, GPU name ("none" without nvidia-smi or a GPU), `openssl version`
    and the checkout's commit (suffixed -dirty when tracked files differ from it)."""
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = "none"
    if sh(["sh", "-c", "command -v nvidia-smi"]) and sh(["nvidia-smi", "-L"]):
        gpu = sh(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()[0]
    commit = sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]) or "unknown"
    if sh(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]):
        commit += "-dirty"
    return {"host_cpu": cpu, "cores": len(os.sched_getaffinity(0)), "gpu": gpu,
            "openssl": sh(["openssl", "version"]), "gpuprov_commit": commit}


def short_version(v):
    """"OpenSSL 3.0.13 30 Jan 2024 (Library: ...)" -> "OpenSSL 3.0.13 30 Jan 2024"."""
    return v.split(" (Library")[0]


def parse_stats(text):
    """Sum the `gpuprov stats: k=v ...` lines (one per process) into a dict; None when absent."""
    total, seen = {}, False
    for m in re.finditer(r"^gpuprov stats: (.*)$", text, re.M):
        seen = True
        for k, v in re.findall(r"(\w+)=([-\d.]+)", m.group(1)):
            if k == "mean_batch":
                continue
            total[k] = total.get(k, 0) + (float(v) if "." in v else int(v))
    # Passthrough (provider/passthrough.c): gpuprov's names, the default provider's functions; the
    # counts stay 0 because gpuprov's own code never runs.
    if seen and re.search(r"^gpuprov passthrough: ", text, re.M):
        total["passthrough"] = 1
    return total if seen else None


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def fmt_dur(s):
    s = int(round(s))
    return "%dh%02dm" % (s // 3600, s % 3600 // 60) if s >= 3600 else "%dm%02ds" % (s // 60, s % 60)


def wrap_prose(text, width=100):
    """Wrap a paragraph as RESULTS.md's prose is wrapped; tables, headings, images stay."""
    if text[:1] in ("", "|", "#", "!", "<"):
        return text
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


def write_section(path, begin, end, section, heading=None, after=None):
    """Put `section` (which starts with `begin` and ends with `end`) into the file at `path`.
    Markers present: the text between them, markers included, is replaced; nothing else moves.
    Absent: under the line `heading` where the file has it, else as `heading` + section after the
    marker `after` where the file has it, else before the file's first `## ` heading (newest
    first), else at the end."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = section.rstrip("\n")
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    elif heading and re.search("^" + re.escape(heading) + "$", text, re.M):
        m = re.search("^" + re.escape(heading) + "$", text, re.M)
        text = text[:m.end()] + "\n\n" + section + text[m.end():]
    else:
        block = (heading + "\n\n" if heading else "") + section + "\n\n"
        if after and after in text:
            at = text.index(after) + len(after)
            text = text[:at] + "\n\n" + block.rstrip("\n") + text[at:]
        else:
            m = re.search(r"^## ", text, re.M)
            at = m.start() if m else len(text)
            if not m and not text.endswith("\n\n"):
                block = "\n" + block
            text = text[:at] + block + text[at:]
    path.write_text(text)
