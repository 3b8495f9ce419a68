#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The Python side's cost per tensor of python/gpuprov_tensors.py's encrypt(): ResNet-50's 320 state_dict tensors on the host stand-in (no GPU), whole and less the provider's work.
"""What encrypt() costs per tensor beyond the provider's own work, measured without a GPU.

The 320 tensors have ResNet-50's state_dict shapes (bench/checkpoint_bench.py's resnet50_shapes),
each shrunk (its largest dimension halved until it holds at most --cap bytes, 4 KiB by default)
so that the host executor's crypto does not bury the Python side; --cap 0 keeps the real sizes.
Kinds of tensor:
  device   the test module's stand-in device memory (__cuda_array_interface__, gpuprov-memory =
           device on the host executor): CI's way to run the device path without a GPU
  host     __array_interface__ tensors in host memory
  torch    PyTorch-shaped objects over stand-in device memory (data_ptr, device, dtype, shape,
           is_contiguous, numel, element_size; a stand-in `torch` module): the module's PyTorch
           path, with attribute calls far cheaper than real PyTorch's
Each (kind, mode) is timed as the fastest of --repeats encrypt() calls after a warm-up (the
fastest, not the median: a shared machine's noise only adds): "whole" through the provider (wall
time); "Python side" through a null libcrypto (NullCrypto: every call that does the provider's work
returns at once, after ctypes has converted its arguments as for the real call; RAND_bytes stays
real), which is what the module costs beyond the provider's work, in wall time and in this
thread's CPU time. --compare FILE times another copy of the module (e.g. `git show
main:python/gpuprov_tensors.py > /tmp/old.py`) in the same process, call for call in turn with
this tree's. --profile prints cProfile's top functions of each Python side.

usage (from the repo root, a build with the test module; 3.5 for the pipeline mode):
  GPUPROV_BACKEND=host GPUPROV_TEST_HOST_DEVMEM=1 GPUPROV_CALIB_CACHE=off GPUPROV_CALIB_SYSTEM=off \\
  OPENSSL_MODULES=build/provider/test-module LD_LIBRARY_PATH=<openssl-3.5>/lib \\
      python3 bench/tensors_overhead.py [--kinds device,host,torch] [--modes pipeline,per-tensor]
      [--repeats 31] [--cap 4096] [--compare FILE] [--profile]
"""
import argparse
import cProfile
import ctypes
import importlib.util
import os
import pstats
import sys
import time
import types

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(root, "python"), os.path.join(root, "python", "tests"), os.path.join(root, "bench")]
import gpuprov_tensors as gt   # noqa: E402
import fake_tensors as ft      # noqa: E402
from checkpoint_bench import resnet50_shapes   # noqa: E402

ITEMSIZE = {"float32": 4, "int64": 8}
TYPESTR = {"float32": "<f4", "int64": "<i8"}


def shrink(shape, itemsize, cap):
    shape = list(shape)
    while cap and shape and itemsize * _prod(shape) > cap:
        k = max(range(len(shape)), key=lambda j: shape[j])
        shape[k] = max(1, shape[k] // 2)
    return tuple(shape)


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class TorchLike:
    """A PyTorch CUDA tensor's face over stand-in device memory (the attributes gpuprov_tensors asks)."""

    def __init__(self, t, dtype):
        self.t, self.shape, self.dtype = t, t.shape, "torch." + dtype
        self.device = types.SimpleNamespace(type="cuda", index=0)
        self._esize = ITEMSIZE[dtype]

    def data_ptr(self):
        return self.t.ptr

    def element_size(self):
        return self._esize

    def numel(self):
        return _prod(self.shape)

    def is_contiguous(self):
        return True

    def zero_(self):
        self.t.zero_()


def fake_torch(standin):
    """A stand-in `torch` module: synchronous calls synchronise its current stream (a no-op here)."""
    class Stream:
        cuda_stream = 0

        def synchronize(self):
            pass
    m = types.ModuleType("torch")
    m.cuda = types.SimpleNamespace(current_stream=lambda device=None: Stream())
    return m


# The calls that do the provider's work: in the null libcrypto, each is a foreign function that
# returns 1 at once (Py_IsInitialized, ignoring its arguments) with the real one's argtypes and
# restype, so ctypes converts the same arguments as for the real call. RAND_bytes stays real.
NULLED = ("EVP_CIPHER_CTX_new", "EVP_CIPHER_CTX_free", "EVP_CIPHER_CTX_set_params", "EVP_CIPHER_CTX_get_params",
          "EVP_CipherInit_ex2", "EVP_CipherUpdate", "EVP_CipherFinal_ex", "EVP_CIPHER_CTX_ctrl",
          "EVP_CipherPipelineEncryptInit", "EVP_CipherPipelineDecryptInit", "EVP_CipherPipelineUpdate",
          "EVP_CipherPipelineFinal", "EVP_CIPHER_CTX_reset")


class NullCrypto:
    """libcrypto less the provider's work (NULLED); every call counted by name."""

    def __init__(self, lib):
        self._lib, self.calls = lib, {}
        me = ctypes.CDLL(None)
        for name in NULLED:
            real = getattr(lib, name, None)
            if real is None:
                continue
            fn = me["Py_IsInitialized"]
            fn.argtypes, fn.restype = real.argtypes, real.restype
            self.__dict__[name] = fn

    def __getattr__(self, name):
        return getattr(self._lib, name)


class Counting:
    def __init__(self, lib):
        self._lib, self.calls = lib, {}

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if not callable(fn):
            return fn
        calls = self.calls

        def counted(*args):
            calls[name] = calls.get(name, 0) + 1
            return fn(*args)
        return counted


class SlabTensor:
    """A stand-in device tensor carved out of one stand-in allocation (the stand-in records at
    most 256 allocations; 640 tensors share one, each at a 256-byte boundary as CUDA places them)."""

    def __init__(self, ptr, shape, typestr, data):
        self.ptr, self.shape, self.typestr, self.device = ptr, shape, typestr, 0
        self.nbytes = len(data)
        ctypes.memmove(ptr, data, self.nbytes)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": None}

    def zero_(self):
        ctypes.memset(self.ptr, 0, self.nbytes)

    def free(self):
        pass


def make_set(kind, standin, cap, slabs):
    specs = [(name, shrink(shape, ITEMSIZE[dtype], cap), dtype) for name, shape, dtype in resnet50_shapes()]
    sizes = [_prod(shape) * ITEMSIZE[dtype] for _, shape, dtype in specs]
    base = off = 0
    if kind != "host":
        base = standin.alloc(sum((n + 255) & ~255 for n in sizes))
        slabs.append(base)
    src, names = [], []
    for (name, shape, dtype), n in zip(specs, sizes):
        data = os.urandom(n)
        if kind == "host":
            t = ft.HostTensor(shape, TYPESTR[dtype], data)
        else:
            t = SlabTensor(base + off, shape, TYPESTR[dtype], data)
            off += (n + 255) & ~255
            if kind == "torch":
                t = TorchLike(t, dtype)
        src.append(t)
        names.append(name)
    return src, names


def load_module(path):
    """Another copy of gpuprov_tensors.py (--compare), under a name of its own."""
    spec = importlib.util.spec_from_file_location("gpuprov_tensors_compare", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def interleaved(fns, repeats):
    """Each of fns called once as a warm-up, then `repeats` rounds calling each in turn (an A/B
    on a shared machine sees the same noise on both sides): per fn the least wall time
    (perf_counter) and the least CPU time of this thread (thread_time: a process waiting for a
    core is not charged)."""
    for fn in fns:
        fn()
    wall, cpu = [float("inf")] * len(fns), [float("inf")] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            c0, t0 = time.thread_time(), time.perf_counter()
            fn()
            wall[k] = min(wall[k], time.perf_counter() - t0)
            cpu[k] = min(cpu[k], time.thread_time() - c0)
    return wall, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default="device,host,torch")
    ap.add_argument("--modes", default="pipeline,per-tensor")
    ap.add_argument("--repeats", type=int, default=31)
    ap.add_argument("--cap", type=int, default=4096)
    ap.add_argument("--compare", metavar="FILE", help="another gpuprov_tensors.py, timed beside this tree's")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    mods = [("this tree", gt)] + ([("compare", load_module(args.compare))] if args.compare else [])
    crypto = gt.load_libcrypto()
    probe = gt.TensorCipher(bytes(32), libcrypto=crypto)
    standin = ft.Standin()
    print("tensors_overhead: OpenSSL %s, pipeline %s, device mode %s, stand-in %s; modules %s"
          % (probe.openssl_version, probe.can_pipeline, probe.has_device_mode, standin.ok,
             ", ".join("%s %s" % (name, m.__file__) for name, m in mods)))
    sys.modules["torch"] = fake_torch(standin)
    key = bytes(range(32))
    for kind in args.kinds.split(","):
        if kind != "host" and not standin.ok:
            print("  %s: no stand-in device memory (GPUPROV_TEST_HOST_DEVMEM=1, the test module)" % kind)
            continue
        slabs = []
        src, names = make_set(kind, standin, args.cap, slabs)
        dst = make_set(kind, standin, args.cap, slabs)[0]
        nbytes = sum(gt._buf(x).nbytes for x in src)
        n = len(src)
        for mode in args.modes.split(","):
            if mode == "pipeline" and not probe.can_pipeline:
                print("  %-6s %-10s not available (needs a 3.5 libcrypto)" % (kind, mode))
                continue
            made, whole, python = [], [], []
            for name, m in mods:
                def cipher(lib, m=m):
                    c = m.TensorCipher(key, pipeline=(mode == "pipeline"), stream=None, libcrypto=lib)
                    made.append(c)
                    return c
                c, cn = cipher(crypto), cipher(NullCrypto(crypto))
                whole.append(lambda c=c: c.encrypt(src, out=dst, names=names))
                python.append(lambda c=cn: c.encrypt(src, out=dst, names=names))
            wall_w, cpu_w = interleaved(whole, args.repeats)
            wall_p, cpu_p = interleaved(python, args.repeats)
            for k, (name, m) in enumerate(mods):
                cc = cipher(Counting(NullCrypto(crypto)), m)
                cc._crypto.calls.clear()   # the constructor's calls
                cc.encrypt(src, out=dst, names=names)
                cc.encrypt(src, out=dst, names=names)
                calls = cc._crypto.calls
                print("  %-6s %-10s %-9s %d tensors %.0f KiB: whole %6.2f ms (%5.1f us a tensor); Python side "
                      "%5.2f ms wall, %5.2f ms CPU (%5.2f us a tensor); libcrypto calls a tensor %.2f"
                      % (kind, mode, name, n, nbytes / 1024, wall_w[k] * 1e3, wall_w[k] / n * 1e6, wall_p[k] * 1e3,
                         cpu_p[k] * 1e3, cpu_p[k] / n * 1e6, sum(calls.values()) / 2 / n))
                most = sorted(calls.items(), key=lambda kv: -kv[1])
                print("         calls in 2 encrypt(): " + ", ".join("%s %d" % kv for kv in most))
            if args.profile:
                for fn in python:
                    prof = cProfile.Profile()
                    prof.enable()
                    for _ in range(5):
                        fn()
                    prof.disable()
                    pstats.Stats(prof).sort_stats("tottime").print_stats(14)
            for x in made:
                x.close()
        for p in slabs:
            standin.free(p)
    probe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
