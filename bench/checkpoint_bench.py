#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# GB/s of encrypting a model's tensors where they live (python/gpuprov_tensors.py, the checkpoint example) against .cpu() + the default provider, per-tensor EVP calls against pipeline calls.
"""Two tensor sets, synthesized on the GPU (torchvision not needed):
  resnet50  ResNet-50's state_dict: 320 tensors, 98 MiB, float32 (BN's num_batches_tracked int64),
            the shapes of torchvision's resnet50 (conv1, 16 bottlenecks in 3/4/6/3, fc)
  llm       an LLM-like set: 8 layers x (q, k, v, o 4096x4096; gate, up 11008x4096; down
            4096x11008; two norms 4096), float16: 72 tensors, 3.0 GiB
Modes, each the median of --repeats timed runs after one warm-up, GB/s = bytes / s (GB = 1e9):
  gpu-pipeline     gpuprov_tensors.encrypt on the GPU, out of place into preallocated tensors,
                   pipeline calls of 32 (OpenSSL 3.5 with gpuprov's pipeline; else not run), on
                   the caller's current stream where gpuprov has stream-ordered mode
  gpu-pipeline-sync  the same with synchronous device mode (stream=None)
  gpu-per-tensor   one EVP message per tensor (the 3.0 path), caller's stream as above
  gpu-per-tensor-sync
  gpu-decrypt      gpuprov_tensors.decrypt of gpu-pipeline's output (gpu-per-tensor's where no
                   pipeline), in place
  cpu-default      each tensor .cpu() (a device-to-host copy), then encrypted on the host by the
                   default provider, one EVP message per tensor (what a program does without gpuprov)
  save-file        examples/encrypted_checkpoint.py's save() to --dir (default /dev/shm): GPU
                   encryption, the copy of the ciphertext to the host and the file write
Every timed run ends with the GPU synchronised. Before timing, each set's GPU ciphertexts are
checked against the default provider (decrypted on the host with their nonces and tags).

usage (GPU host; PyTorch, else CuPy):
  OPENSSL_MODULES=build/provider LD_LIBRARY_PATH=/path/to/openssl-3.5/lib \\
      python3 bench/checkpoint_bench.py [--sets resnet50,llm] [--modes ...] [--repeats 3]
      [--cipher AES-256-GCM|ChaCha20-Poly1305] [--csv FILE]
Without LD_LIBRARY_PATH at a 3.5 libcrypto the pipeline modes are reported as not available.
Without PyTorch and CuPy it says so and exits 0.
"""
import argparse
import csv
import ctypes
import os
import statistics
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(root, "python"), os.path.join(root, "python", "examples")]

MODES = ["gpu-pipeline", "gpu-pipeline-sync", "gpu-per-tensor", "gpu-per-tensor-sync", "gpu-decrypt",
         "cpu-default", "save-file"]


def resnet50_shapes():
    """(name, shape, dtype) of torchvision's resnet50().state_dict(), in its order."""
    out = []

    def conv(name, cout, cin, k):
        out.append((name + ".weight", (cout, cin, k, k), "float32"))

    def bn(name, c):
        for p in ("weight", "bias", "running_mean", "running_var"):
            out.append(("%s.%s" % (name, p), (c,), "float32"))
        out.append((name + ".num_batches_tracked", (), "int64"))

    conv("conv1", 64, 3, 7)
    bn("bn1", 64)
    cin = 64
    for li, (blocks, width) in enumerate(((3, 64), (4, 128), (6, 256), (3, 512)), 1):
        for b in range(blocks):
            p = "layer%d.%d" % (li, b)
            conv(p + ".conv1", width, cin, 1)
            bn(p + ".bn1", width)
            conv(p + ".conv2", width, width, 3)
            bn(p + ".bn2", width)
            conv(p + ".conv3", width * 4, width, 1)
            bn(p + ".bn3", width * 4)
            if b == 0:
                conv(p + ".downsample.0", width * 4, cin, 1)
                bn(p + ".downsample.1", width * 4)
            cin = width * 4
    out.append(("fc.weight", (1000, 2048), "float32"))
    out.append(("fc.bias", (1000,), "float32"))
    return out


def llm_shapes(layers=8, hidden=4096, inter=11008):
    out = []
    for i in range(layers):
        p = "layers.%d." % i
        out += [(p + "attn." + n + ".weight", (hidden, hidden), "float16") for n in ("q", "k", "v", "o")]
        out += [(p + "mlp.gate.weight", (inter, hidden), "float16"), (p + "mlp.up.weight", (inter, hidden), "float16"),
                (p + "mlp.down.weight", (hidden, inter), "float16"),
                (p + "norm1.weight", (hidden,), "float16"), (p + "norm2.weight", (hidden,), "float16")]
    return out


class Torch:
    name = "PyTorch"

    def __init__(self):
        import torch
        self.t = torch
        if not torch.cuda.is_available():
            raise RuntimeError("PyTorch sees no CUDA GPU")
        self.version, self.gpu = torch.__version__, torch.cuda.get_device_name()

    def make(self, shape, dtype):
        t = self.t
        if dtype == "int64":
            return t.zeros(shape, dtype=t.int64, device="cuda")
        return t.randn(shape, dtype=getattr(t, dtype), device="cuda")

    def empty_like(self, x):
        return self.t.empty_like(x)

    def cpu(self, x):
        return x.cpu()

    def host_bytes(self, x):
        h = x.cpu()
        return ctypes.string_at(h.data_ptr(), h.numel() * h.element_size()) if h.numel() else b""

    def sync(self):
        self.t.cuda.synchronize()

    def backend(self):
        import encrypted_checkpoint as ec
        return ec.TorchBackend("cuda")


class Cupy:
    name = "CuPy"

    def __init__(self):
        import cupy
        self.c = cupy
        self.version = cupy.__version__
        self.gpu = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()

    def make(self, shape, dtype):
        c = self.c
        if dtype == "int64":
            return c.zeros(shape, dtype=c.int64)
        return c.random.standard_normal(shape, dtype=c.float32).astype(dtype)

    def empty_like(self, x):
        return self.c.empty_like(x)

    def cpu(self, x):
        return x.get()

    def host_bytes(self, x):
        return x.get().tobytes()

    def sync(self):
        self.c.cuda.runtime.deviceSynchronize()

    def backend(self):
        import encrypted_checkpoint as ec
        return ec.CupyBackend()


class Standin:
    """No GPU: the test module's stand-in device memory (GPUPROV_BACKEND=host
    GPUPROV_TEST_HOST_DEVMEM=1, OPENSSL_MODULES at build/provider/test-module): how CI runs this
    script's logic (bench/meson.build); its figures mean nothing."""
    name, version, gpu = "stand-in", "-", "the host executor"

    def __init__(self):
        sys.path.insert(0, os.path.join(root, "python", "tests"))
        import fake_tensors
        import gpuprov_tensors as gt
        gt.TensorCipher(bytes(32)).close()   # loads the module
        self.ft, self.sd = fake_tensors, fake_tensors.Standin()
        if not self.sd.ok:
            raise SystemExit("checkpoint_bench: --library standin needs the test module and GPUPROV_TEST_HOST_DEVMEM=1")

    def make(self, shape, dtype):
        typestr = {"float32": "<f4", "float16": "<f2", "int64": "<i8"}[dtype]
        t = self.ft.FakeCudaTensor(self.sd, shape, typestr)
        t.write(os.urandom(t.nbytes))
        return t

    def empty_like(self, x):
        return self.ft.FakeCudaTensor(self.sd, x.shape, x.typestr)

    def cpu(self, x):
        return self.ft.HostTensor(x.shape, x.typestr, x.read())

    def host_bytes(self, x):
        return x.read()

    def sync(self):
        pass

    def backend(self):
        import encrypted_checkpoint as ec
        return ec.FakeBackend(device=True)


def pick_library(name=None):
    if name == "standin":
        return Standin()
    try:
        return Torch()
    except ImportError:
        print("checkpoint_bench: PyTorch is not installed; trying CuPy")
    except RuntimeError as e:
        print("checkpoint_bench: %s; trying CuPy" % e)
    try:
        return Cupy()
    except ImportError:
        print("checkpoint_bench: CuPy is not installed either: nothing to measure")
        return None


def timed(fn, lib, repeats):
    fn()
    lib.sync()
    times = []
    for _ in range(repeats):
        lib.sync()
        t0 = time.perf_counter()
        fn()
        lib.sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def verify(gt, crypto, cipher, lib, names, src, dst, sealed):
    """The GPU's ciphertexts, decrypted on the host by the default provider, give the tensors."""
    ref = gt.TensorCipher(bytes(range(32)), cipher, provider="default", libcrypto=crypto)
    for i, (n, s, d) in enumerate(zip(names, src, dst)):
        view = bytearray(lib.host_bytes(d))
        ref.decrypt([view], [sealed[i]], aads=[gt.default_aad(s, n)])
        if bytes(view) != lib.host_bytes(s):
            raise SystemExit("checkpoint_bench: tensor %s: the default provider reads other bytes" % n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="resnet50,llm")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cipher", default="AES-256-GCM")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    ap.add_argument("--csv")
    ap.add_argument("--library", choices=["auto", "standin"], default="auto",
                    help="standin: CI's check of this script on the host stand-in (no GPU)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N tensors of each set")
    args = ap.parse_args()
    lib = pick_library(args.library if args.library != "auto" else None)
    if lib is None:
        return 0
    import gpuprov_tensors as gt
    import encrypted_checkpoint as ec
    crypto = gt.load_libcrypto()
    key = bytes(range(32))
    probe = gt.TensorCipher(key, args.cipher, libcrypto=crypto)
    print("checkpoint_bench: %s %s on %s; OpenSSL %s; %s; gpuprov pipeline: %s; stream-ordered mode: %s"
          % (lib.name, lib.version, lib.gpu, probe.openssl_version, args.cipher,
             "yes" if probe.can_pipeline else "no (needs a 3.5 libcrypto)",
             "yes" if probe.has_stream_mode else "no"))
    sets = {"resnet50": resnet50_shapes, "llm": llm_shapes}
    modes = args.modes.split(",")
    rows = []
    for set_name in args.sets.split(","):
        shapes = sets[set_name]()[:args.limit or None]
        names = [n for n, _, _ in shapes]
        src = [lib.make(s, d) for _, s, d in shapes]
        dst = [lib.empty_like(x) for x in src]
        lib.sync()
        total = sum(gt._buf(x).nbytes for x in src)
        print("\n%s: %d tensors, %.1f MiB" % (set_name, len(src), total / 2**20))
        ciphers = {
            "pipeline": gt.TensorCipher(key, args.cipher, pipeline=True, libcrypto=crypto) if probe.can_pipeline else None,
            "per-tensor": gt.TensorCipher(key, args.cipher, pipeline=False, libcrypto=crypto),
        }
        sealed = (ciphers["pipeline"] or ciphers["per-tensor"]).encrypt(src, out=dst, names=names)
        lib.sync()
        verify(gt, crypto, args.cipher, lib, names, src, dst, sealed)
        print("  GPU ciphertexts checked against the default provider: identical")
        for mode in modes:
            c = ciphers["pipeline" if "pipeline" in mode else "per-tensor"]
            if mode == "gpu-decrypt":
                c = ciphers["pipeline"] or ciphers["per-tensor"]
            stream = None if mode.endswith("-sync") else "auto"
            if mode.startswith("gpu-") and c is None:
                print("  %-20s not available (no pipeline here)" % mode)
                continue
            if mode.endswith("-sync") and not probe.has_stream_mode:
                continue   # the same as the mode without -sync
            if mode == "gpu-decrypt":
                box = {}

                def fn():
                    box["s"] = c.encrypt(src, out=dst, names=names)
                    lib.sync()
                    t0 = time.perf_counter()
                    c.decrypt(dst, box["s"], names=names)
                    lib.sync()
                    box["t"] = time.perf_counter() - t0
                times = []
                fn()
                for _ in range(args.repeats):
                    fn()
                    times.append(box["t"])
                sec = statistics.median(times)
            elif mode.startswith("gpu-"):
                sec = timed(lambda: c.encrypt(src, out=dst, names=names, stream=stream), lib, args.repeats)
            elif mode == "cpu-default":
                ref = gt.TensorCipher(key, args.cipher, provider="default", libcrypto=crypto)
                sec = timed(lambda: ref.encrypt([lib.cpu(x) for x in src], names=names), lib, args.repeats)
            elif mode == "save-file":
                backend = lib.backend()
                path = os.path.join(args.dir, "checkpoint_bench-%d.gpck" % os.getpid())
                sd = dict(zip(names, src))
                try:
                    sec = timed(lambda: ec.save(path, sd, key, backend, args.cipher, libcrypto=crypto), lib,
                                args.repeats)
                finally:
                    if os.path.exists(path):
                        os.unlink(path)
            else:
                raise SystemExit("unknown mode %s" % mode)
            gbs = total / sec / 1e9
            rows.append({"set": set_name, "mode": mode, "cipher": args.cipher, "tensors": len(src),
                         "bytes": total, "ms": "%.2f" % (sec * 1e3), "GB/s": "%.2f" % gbs,
                         "tensors/s": "%.0f" % (len(src) / sec)})
            print("  %-20s %9.2f ms  %8.2f GB/s  %9.0f tensors/s" % (mode, sec * 1e3, gbs, len(src) / sec))
        for x in src + dst:
            if hasattr(x, "free"):
                x.free()
        del src, dst
    if args.csv and rows:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
