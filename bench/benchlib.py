# SPDX-License-Identifier: Apache-2.0
"""What bench/compare.py and bench/tax.py share: host facts, the OpenSSL installation they run,
gpuprov's stats line, medians, durations, and the writer of a marked section of bench/RESULTS.md
(standard library only)."""

import json
import os
import re
import subprocess
import sys
import sysconfig
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


def host_info(openssl=None):
    """CPU model, usable cores, GPU name ("none" without nvidia-smi or a GPU), `openssl version`
    of `openssl` (an OpenSSL; None: the system's) and the checkout's commit (suffixed -dirty when
    tracked files differ from it)."""
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
            "openssl": openssl.version if openssl else sh(["openssl", "version"]),
            "gpuprov_commit": commit}


OPENSSL_HELP = (
    "run everything under the OpenSSL installed at PREFIX instead of the system's `openssl`: a "
    "source build (PREFIX/bin/openssl, PREFIX/lib64 or PREFIX/lib) or Debian packages unpacked "
    "with `dpkg -x DEB PREFIX` (PREFIX/usr/bin/openssl, PREFIX/usr/lib/<multiarch>); its openssl "
    "runs with LD_LIBRARY_PATH at its library directory, and so does every process that loads "
    "gpuprov.so. Its `openssl version` is what the CSV, JSON and RESULTS record. gpuprov.so "
    "from --build works under either line when built against 3.0's headers (the provider "
    "interface is stable across 3.x); built against newer headers it may not load under an "
    "older line. A warning says when --build was built against another line than the one run "
    "(a build against a source build's headers: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig meson "
    "setup BUILD)")


class OpenSSL:
    """The OpenSSL a benchmark runs: the system's `openssl` (prefix None), or the installation at
    `prefix`, whose binary runs with LD_LIBRARY_PATH at its library directory so that the binary,
    gpuprov.so (libcrypto.so.3 is loaded once per process, by the binary) and nginx use that
    installation's libcrypto and libssl. `version`: its `openssl version`."""

    def __init__(self, prefix=None):
        self.prefix, self.bin, self.libdir = None, "openssl", None
        if prefix is None:
            self.version = sh(["openssl", "version"])
            return
        self.prefix = Path(prefix).resolve()
        self.bin, self.libdir = openssl_layout(self.prefix)
        try:
            p = subprocess.run([self.bin, "version"], env=self.env(os.environ),
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            sys.exit("--openssl %s: %s version: %s" % (prefix, self.bin, e))
        if p.returncode != 0 or not p.stdout.startswith("OpenSSL "):
            why = p.stderr.strip().splitlines() or ["exit %d" % p.returncode]
            sys.exit("--openssl %s: %s version (LD_LIBRARY_PATH=%s) fails: %s" % (
                prefix, self.bin, self.libdir, why[-1]))
        self.version = p.stdout.strip()

    def env(self, env):
        """A copy of the environment `env` in which this OpenSSL's binaries find its libraries."""
        env = dict(env)
        if self.libdir is not None:
            env["LD_LIBRARY_PATH"] = str(self.libdir) + (
                ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        return env

    def warnings(self, build):
        """Sentences on what does not match: the binary and the library it loaded differ (an
        RPATH won over LD_LIBRARY_PATH), or gpuprov in `build` was built against another line's
        headers than the one it runs with (meson-info/intro-dependencies.json)."""
        out = []
        binary, library = openssl_numbers(self.version)
        if binary != library:
            out.append("%s is OpenSSL %s but runs with libcrypto %s" % (self.bin, binary, library))
        built = build_libcrypto(build)
        if built is None:
            out.append("cannot tell which OpenSSL %s was built against (no readable "
                       "meson-info/intro-dependencies.json)" % build)
        elif library and line_of(built) != line_of(library):
            out.append("gpuprov in %s was built against OpenSSL %s's headers, the runs use %s: %s"
                       % (build, built, library,
                          "it may not load (built against a newer line than it runs with)"
                          if line_of(built) > line_of(library) else
                          "it loads (the provider interface is stable across 3.x), though a "
                          "build against the line it runs with is what that line's users get"))
        return out


def line_of(number):
    """(3, 5) for "3.5.9": the release line."""
    return tuple(int(x) for x in number.split(".")[:2])


def openssl_layout(prefix):
    """(openssl binary, library directory) of the installation at `prefix`: a source build's
    bin/ and lib64/ or lib/, or unpacked Debian packages' usr/bin/ and usr/lib/<multiarch>/ (this
    machine's triplet first); exits naming the layouts when neither holds."""
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    debian = sorted(prefix.glob("usr/lib/*/libcrypto.so.3"),
                    key=lambda p: p.parent.name != arch)
    for binary, libs in ((prefix / "bin" / "openssl",
                          [prefix / "lib64" / "libcrypto.so.3", prefix / "lib" / "libcrypto.so.3"]),
                         (prefix / "usr" / "bin" / "openssl",
                          debian + [prefix / "usr" / "lib64" / "libcrypto.so.3",
                                    prefix / "usr" / "lib" / "libcrypto.so.3"])):
        lib = next((l for l in libs if l.is_file()), None)
        if binary.is_file() and lib is not None:
            return str(binary), lib.parent
    sys.exit("--openssl %s: neither bin/openssl with lib64/ or lib/libcrypto.so.3 (a source "
             "build) nor usr/bin/openssl with usr/lib/<multiarch>/libcrypto.so.3 (Debian packages "
             "unpacked with dpkg -x) is there" % prefix)


def openssl_numbers(version):
    """(binary, library) release numbers from `openssl version`'s "OpenSSL 3.0.22 25 Aug 2026
    (Library: OpenSSL 3.5.7 9 Jun 2026)"; the library's is the binary's where no Library part
    is printed, None where no number is."""
    m = re.findall(r"OpenSSL (\d+\.\d+\.\d+)", version or "")
    return (m[0], m[-1]) if m else (None, None)


def build_libcrypto(build):
    """The libcrypto version meson configured `build` against (its headers); None when unknown."""
    try:
        deps = json.load(open(Path(build) / "meson-info" / "intro-dependencies.json"))
    except (OSError, ValueError):
        return None
    return next((d.get("version") for d in deps if d.get("name") == "libcrypto"), None)


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
