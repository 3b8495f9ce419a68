# SPDX-License-Identifier: Apache-2.0
"""Checks of benchlib.OpenSSL (--openssl PREFIX of bench/compare and bench/tax) on stand-in
installations: both layouts are found, the binary runs with LD_LIBRARY_PATH at its own library
directory, its `openssl version` is the one recorded, and a build of another line is warned about."""

import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import OpenSSL, build_libcrypto, host_info, openssl_numbers  # noqa: E402

# A stand-in `openssl`: names its release only when LD_LIBRARY_PATH starts at its own library
# directory, and another library otherwise, as a real 3.5 binary finding the system's 3.0 would.
STUB = """#!/bin/sh
case "$LD_LIBRARY_PATH" in
  {libdir}|{libdir}:*) echo "OpenSSL 3.5.9 27 Jan 2026 (Library: OpenSSL 3.5.9 27 Jan 2026)" ;;
  *) echo "OpenSSL 3.5.9 27 Jan 2026 (Library: OpenSSL 3.0.13 30 Jan 2024)" ;;
esac
"""


def install(prefix, bindir, libdir):
    """A stand-in installation: bindir/openssl (the stub) and libdir/libcrypto.so.3."""
    (prefix / bindir).mkdir(parents=True)
    (prefix / libdir).mkdir(parents=True)
    (prefix / libdir / "libcrypto.so.3").write_bytes(b"")
    stub = prefix / bindir / "openssl"
    stub.write_text(STUB.format(libdir=prefix.resolve() / libdir))
    stub.chmod(0o755)


def build_dir(root, version):
    """A meson build directory whose libcrypto dependency has `version`."""
    info = root / "meson-info"
    info.mkdir(parents=True)
    (info / "intro-dependencies.json").write_text(json.dumps(
        [{"name": "threads", "version": "unknown"}, {"name": "libcrypto", "version": version}]))
    return root


class OpenSSLPrefix(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_source_build_layout(self):
        prefix = self.root / "src"
        install(prefix, "bin", "lib64")
        o = OpenSSL(prefix)
        self.assertEqual(o.bin, str(prefix / "bin" / "openssl"))
        self.assertEqual(o.libdir, prefix / "lib64")
        self.assertEqual(openssl_numbers(o.version), ("3.5.9", "3.5.9"))
        self.assertEqual(host_info(o)["openssl"], o.version)

    def test_debian_layout_and_environment(self):
        prefix = self.root / "deb"
        install(prefix, "usr/bin", "usr/lib/x86_64-linux-gnu")
        o = OpenSSL(prefix)
        self.assertEqual(o.libdir, prefix / "usr/lib/x86_64-linux-gnu")
        env = o.env({"LD_LIBRARY_PATH": "/elsewhere", "PATH": "/bin"})
        self.assertEqual(env["LD_LIBRARY_PATH"], "%s:/elsewhere" % o.libdir)
        self.assertEqual(env["PATH"], "/bin")
        self.assertEqual(o.env({})["LD_LIBRARY_PATH"], str(o.libdir))

    def test_no_installation_exits(self):
        (self.root / "bin").mkdir()
        with self.assertRaises(SystemExit) as e:
            OpenSSL(self.root)
        self.assertIn("dpkg -x", str(e.exception))

    def test_system_openssl_leaves_the_environment(self):
        o = OpenSSL(None)
        self.assertEqual((o.bin, o.libdir, o.prefix), ("openssl", None, None))
        self.assertEqual(o.env({"A": "1"}), {"A": "1"})

    def test_warnings(self):
        prefix = self.root / "src"
        install(prefix, "bin", "lib")
        o = OpenSSL(prefix)
        self.assertEqual(o.warnings(build_dir(self.root / "b357", "3.5.7")), [])
        older = o.warnings(build_dir(self.root / "b30", "3.0.13"))
        self.assertEqual(len(older), 1)
        self.assertIn("3.0.13's headers, the runs use 3.5.9: it loads", older[0])
        o.version = "OpenSSL 3.0.13 30 Jan 2024 (Library: OpenSSL 3.0.13 30 Jan 2024)"
        self.assertIn("may not load", o.warnings(self.root / "b357")[0])
        self.assertIn("cannot tell", o.warnings(self.root / "none")[0])
        o.version = "OpenSSL 3.5.9 27 Jan 2026 (Library: OpenSSL 3.0.13 30 Jan 2024)"
        self.assertIn("runs with libcrypto 3.0.13", o.warnings(self.root / "b30")[0])

    def test_build_libcrypto(self):
        self.assertEqual(build_libcrypto(build_dir(self.root / "b", "3.0.22")), "3.0.22")
        self.assertIsNone(build_libcrypto(self.root / "missing"))


if __name__ == "__main__":
    unittest.main()
