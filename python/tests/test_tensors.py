#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# gpuprov_tensors against the default provider: stand-in device tensors and host tensors, pipeline and per-message calls, fake streams, contexts kept between calls, every kind of tampering.
"""Run by meson (python/meson.build) with OPENSSL_MODULES at the test module. With
GPUPROV_TEST_HOST_DEVMEM=1 (backend host) the "device" tensors live in the host executor's
stand-in device memory; without it (backend cpu) only host tensors are used. GPTEST_EXPECT_PIPELINE
= 1 or 0 says whether gpuprov's ciphers must pipeline here; "auto" (the default): on OpenSSL 3.5
and later (gpuprov serves the pipeline API on every executor it runs; passthrough ciphers, under
backend auto without a GPU, do not: not a case the suites run)."""
import ctypes
import os
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.dirname(here)]
import gpuprov_tensors as gt   # noqa: E402
import fake_tensors as ft      # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


class Counting:
    """A libcrypto whose EVP calls are counted by name (the calls the module makes per tensor list)."""

    def __init__(self, lib):
        self._lib, self.counts = lib, {}

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if not callable(fn):
            return fn

        def counted(*args):
            self.counts[name] = self.counts.get(name, 0) + 1
            return fn(*args)
        return counted

    def reset(self):
        self.counts = {}


def ref_seal(crypto, cipher, key, nonce, aad, data, enc=True, tag=None):
    """The default provider on host memory, one EVP message: (output, tag or verdict)."""
    c = crypto.EVP_CIPHER_fetch(None, cipher.encode(), b"provider=default")
    ctx = crypto.EVP_CIPHER_CTX_new()
    n, out = ctypes.c_int(), ctypes.create_string_buffer(max(len(data), 1))
    tb = ctypes.create_string_buffer(tag or b"", 16)
    ok = crypto.EVP_CipherInit_ex2(ctx, c, key, nonce, int(enc), None) == 1
    ok = ok and crypto.EVP_CipherUpdate(ctx, None, ctypes.byref(n), aad, len(aad)) == 1
    if not enc:
        ok = ok and crypto.EVP_CIPHER_CTX_ctrl(ctx, 0x11, 16, tb) == 1
    if data:
        ok = ok and crypto.EVP_CipherUpdate(ctx, out, ctypes.byref(n), data, len(data)) == 1
    fin = crypto.EVP_CipherFinal_ex(ctx, ctypes.create_string_buffer(32), ctypes.byref(n)) == 1
    if enc:
        ok = ok and fin and crypto.EVP_CIPHER_CTX_ctrl(ctx, 0x10, 16, tb) == 1
        assert ok, "default provider failed"
    crypto.EVP_CIPHER_CTX_free(ctx)
    crypto.EVP_CIPHER_free(c)
    return out.raw[:len(data)], (tb.raw if enc else ok and fin)


def sizes(rng, count):
    fixed = [0, 1, 15, 16, 17, 63, 64, 1000, 4096, 16384, 65537, 4096]   # two of 4096: the swap
    return (fixed + [rng.randrange(1, 200000) for _ in range(count)])[:count]


def make(kind, standin, n, rng):
    data = bytes(rng.getrandbits(8) for _ in range(min(n, 64))) * (n // 64 + 1)
    data = data[:n]
    if kind == "device":
        return ft.FakeCudaTensor(standin, (n,), "|u1", data)
    return ft.HostTensor((n,), "|u1", data)


def run_case(crypto, counting, cipher, kind, standin, pipeline, in_place, stream, rng, count):
    label = "%s %s %s %s%s" % (cipher, kind, "pipeline" if pipeline else "per-message",
                               "in-place" if in_place else "out-of-place", " stream" if stream else "")
    key = bytes(rng.getrandbits(8) for _ in range(32))
    c = gt.TensorCipher(key, cipher, pipeline=pipeline, libcrypto=counting)
    ts = [make(kind, standin, n, rng) for n in sizes(rng, count)]
    outs = ts if in_place else [make(kind, standin, t.nbytes, rng) for t in ts]
    plain = [t.read() for t in ts]
    names = ["layer%d.weight" % i for i in range(len(ts))]
    sync = (lambda: standin.stream_sync(stream)) if stream else (lambda: None)
    counting.reset()
    sealed = c.encrypt(ts, out=None if in_place else outs, names=names, stream=stream or None)
    sync()
    calls = dict(counting.counts)
    if pipeline:
        piped = sum(1 for t in ts if t.nbytes > 0)
        check(calls.get("EVP_CipherPipelineUpdate", 0) == 2 * ((piped + 31) // 32),
              "%s: %d pipeline updates for %d tensors" % (label, calls.get("EVP_CipherPipelineUpdate", 0), piped))
        check(calls.get("EVP_CipherUpdate", 0) == 1 * (len(ts) - piped),
              "%s: per-message updates beside the pipelines: %s" % (label, calls))
    else:
        check("EVP_CipherPipelineUpdate" not in calls, "%s: a pipeline call" % label)
    check(len({s.nonce for s in sealed}) == len(ts) and all(len(s.nonce) == 12 for s in sealed),
          "%s: nonces not 12 bytes and distinct" % label)
    for i, t in enumerate(ts):
        aad = gt.default_aad(t, names[i])
        ct, tag = ref_seal(crypto, cipher, key, sealed[i].nonce, aad, plain[i])
        if outs[i].read() != ct or sealed[i].tag != tag:
            check(False, "%s: tensor %d (%d bytes) differs from the default provider" % (label, i, t.nbytes))
            break
    if not in_place:
        check([t.read() for t in ts] == plain, "%s: input changed by an out-of-place encrypt" % label)
    # Decrypt back (into fresh outputs when out of place).
    backs = outs if in_place else [make(kind, standin, t.nbytes, rng) for t in ts]
    c.decrypt(outs, sealed, out=None if in_place else backs, names=names, stream=stream or None)
    sync()
    check([b.read() for b in backs] == plain, "%s: decryption did not restore the tensors" % label)
    # Tampering: each refused, naming the tensor, every output zeroed.
    if in_place:
        c2_sealed = c.encrypt(ts, names=names, stream=stream or None)
        sync()
        cts = [t.read() for t in ts]
    else:
        c2_sealed, cts = sealed, [o.read() for o in outs]
    victim = [i for i in range(len(ts)) if ts[i].nbytes == 4096][0]
    same = [i for i in range(len(ts)) if ts[i].nbytes == 4096 and i != victim]

    def attempt(what, mutate_ct=None, sealed_list=None, aad_names=None, expect=None):
        src = ts if in_place else outs
        for t, ct in zip(src, cts):
            t.write(ct)
        if mutate_ct:
            mutate_ct(src)
        dst = None if in_place else backs
        for b in (backs if not in_place else []):
            b.write(b"\x5a" * b.nbytes)
        try:
            c.decrypt(src, sealed_list or c2_sealed, out=dst, names=aad_names or names, stream=stream or None)
            sync()
            check(False, "%s: %s accepted" % (label, what))
        except gt.AuthenticationError as e:
            sync()
            want = [(aad_names or names)[i] for i in (expect or [victim])]
            check(sorted(e.names) == sorted(want), "%s: %s named %s, not %s" % (label, what, e.names, want))
            check(all(b.read() == bytes(b.nbytes) for b in (src if in_place else backs)),
                  "%s: %s left output behind" % (label, what))

    def flip_ct(src):
        x = bytearray(src[victim].read())
        x[len(x) // 2] ^= 0x01
        src[victim].write(x)

    def flip(field):
        s = list(c2_sealed)
        nonce, tag = bytearray(s[victim].nonce), bytearray(s[victim].tag)
        (nonce if field == "nonce" else tag)[3] ^= 0x80
        s[victim] = gt.Sealed(bytes(nonce), bytes(tag))
        return s

    attempt("a flipped ciphertext byte", mutate_ct=flip_ct)
    attempt("a flipped tag byte", sealed_list=flip("tag"))
    attempt("a flipped nonce byte", sealed_list=flip("nonce"))
    renamed = list(names)
    renamed[victim] = "other.weight"
    attempt("another name (AAD)", aad_names=renamed)
    check(count < 12 or same, "%s: no two tensors of one size to swap" % label)
    if same:
        def swap(src):
            a, b = src[victim].read(), src[same[0]].read()
            src[victim].write(b)
            src[same[0]].write(a)
        attempt("two tensors swapped", mutate_ct=swap, expect=[victim, same[0]])
    for t in {id(x): x for x in ts + outs + backs}.values():
        t.free()
    c.close()
    print("ran: %s (%d tensors)" % (label, len(ts)))


def kept_contexts(crypto, standin, probe, rng):
    """A TensorCipher keeps its EVP contexts between calls (re-initialised with new nonces only):
    a second encrypt() makes no context, and every call's results still match the default
    provider's, after a refused decryption too; close() frees every context made."""
    stream = standin.stream_new() if standin.ok and standin.has_streams and probe.has_stream_mode else None
    cases = [(k, p, None) for k in ["host"] + (["device"] if standin.ok else [])
             for p in ([True, False] if probe.can_pipeline else [False])]
    if stream and probe.can_pipeline:
        cases.append(("device", True, stream))
    for kind, pipeline, s in cases:
        label = "kept contexts: %s %s%s" % (kind, "pipeline" if pipeline else "per-message", " stream" if s else "")
        key = bytes(rng.getrandbits(8) for _ in range(32))
        counting = Counting(crypto)
        c = gt.TensorCipher(key, pipeline=pipeline, stream=s, libcrypto=counting)
        ts = [make(kind, standin, n, rng) for n in [1000 + 37 * i for i in range(40)]]   # pipes of 32 and 8
        plain = [t.read() for t in ts]
        seen = set()

        def sealed_right(round_):
            sealed = c.encrypt(ts, stream=s)
            if s:
                standin.stream_sync(s)
            for i, t in enumerate(ts):
                ct, tag = ref_seal(crypto, "AES-256-GCM", key, sealed[i].nonce, gt.default_aad(t, i), plain[i])
                if t.read() != ct or sealed[i].tag != tag:
                    check(False, "%s: round %d, tensor %d differs from the default provider" % (label, round_, i))
                    break
            check(not seen & {x.nonce for x in sealed} and len({x.nonce for x in sealed}) == len(ts),
                  "%s: round %d reuses a nonce" % (label, round_))
            seen.update(x.nonce for x in sealed)
            return sealed

        sealed = sealed_right(1)
        c.decrypt(ts, sealed, stream=s)
        counting.reset()
        sealed = sealed_right(2)
        check(counting.counts.get("EVP_CIPHER_CTX_new", 0) == 0,
              "%s: the second encrypt() made %d contexts" % (label, counting.counts.get("EVP_CIPHER_CTX_new", 0)))
        bad = list(sealed)
        bad[35] = gt.Sealed(bad[35].nonce, bytes(16))
        try:
            c.decrypt(ts, bad, stream=s)
            check(False, "%s: a wrong tag accepted" % label)
        except gt.AuthenticationError as e:
            check(e.names == [35], "%s: refusal named %s" % (label, e.names))
        for t, p in zip(ts, plain):
            t.write(p)
        sealed = sealed_right(3)
        c.decrypt(ts, sealed, stream=s)
        if s:
            standin.stream_sync(s)
        check([t.read() for t in ts] == plain, "%s: the last decryption did not restore the tensors" % label)
        counting.reset()
        c.close()
        check(counting.counts.get("EVP_CIPHER_CTX_free", 0) >= 1, "%s: close() freed no context" % label)
        for t in ts:
            t.free()
        print("ran: %s" % label)
    if stream:
        standin.stream_free(stream)


def torch_like(crypto, standin, probe, rng):
    """The PyTorch paths (data_ptr, the current stream, zero_ under no_grad) through a stand-in
    `torch` module: stream "auto" must queue on torch.cuda.current_stream().cuda_stream."""
    import contextlib
    import types
    stream = standin.stream_new() if standin.has_streams else 0
    seen = {"current": 0, "sync": 0, "no_grad": 0}

    class Stream:
        cuda_stream = stream

        def synchronize(self):
            seen["sync"] += 1
            if stream:
                standin.stream_sync(stream)

    def current_stream(device=None):
        seen["current"] += 1
        return Stream()

    @contextlib.contextmanager
    def no_grad():
        seen["no_grad"] += 1
        yield

    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(current_stream=current_stream)
    fake.no_grad = no_grad

    class Tensor:
        def __init__(self, n):
            self.t = ft.FakeCudaTensor(standin, (n // 4,), "<f4", bytes(rng.getrandbits(8) for _ in range(n)))
            self.shape, self.dtype = (n // 4,), "torch.float32"
            self.device = types.SimpleNamespace(type="cuda", index=0)

        def data_ptr(self):
            return self.t.ptr

        def element_size(self):
            return 4

        def numel(self):
            return self.shape[0]

        def is_contiguous(self):
            return True

        def zero_(self):
            self.t.zero_()

    saved = sys.modules.get("torch")
    sys.modules["torch"] = fake
    try:
        c = gt.TensorCipher(bytes(range(32)), libcrypto=crypto)
        ts = [Tensor(n) for n in (4, 64, 4096, 40000)]
        plain = [t.t.read() for t in ts]
        sealed = c.encrypt(ts)
        Stream().synchronize()
        for t, p, s in zip(ts, plain, sealed):
            ct, tag = ref_seal(crypto, "AES-256-GCM", bytes(range(32)), s.nonce, gt.default_aad(t, ts.index(t)), p)
            check(t.t.read() == ct and s.tag == tag, "torch-like: differs from the default provider")
        check(seen["current"] >= 1, "torch-like: the current stream was not asked for")
        check(c.has_stream_mode == bool(stream) or not stream, "torch-like: stream mode")
        x = bytearray(ts[2].t.read())
        x[0] ^= 1
        ts[2].t.write(x)
        try:
            c.decrypt(ts, sealed)
            check(False, "torch-like: a flipped byte accepted")
        except gt.AuthenticationError as e:
            Stream().synchronize()
            check(e.names == [2] and all(t.t.read() == bytes(t.t.nbytes) for t in ts) and seen["no_grad"] == len(ts),
                  "torch-like: refusal named %s, outputs zeroed under no_grad: %s" % (e.names, seen))
        for t in ts:
            t.t.free()
    finally:
        if saved is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = saved
        if stream:
            standin.stream_free(stream)


def main():
    rng = random.Random(int(os.environ.get("GPTEST_SEED", "51")))
    crypto = gt.load_libcrypto()
    counting = Counting(crypto)
    probe = gt.TensorCipher(bytes(32), libcrypto=crypto)
    version = crypto.OpenSSL_version_num()
    print("OpenSSL %s; pipeline: %s; device mode: %s; stream-ordered: %s"
          % (probe.openssl_version, probe.can_pipeline, probe.has_device_mode, probe.has_stream_mode))
    expect = os.environ.get("GPTEST_EXPECT_PIPELINE", "auto")
    if expect == "auto":
        expect = "1" if version >= 0x30500000 else "0"
    check(probe.can_pipeline == (expect == "1"), "EVP_CIPHER_can_pipeline is %s, expected %s"
          % (probe.can_pipeline, expect == "1"))
    standin = ft.Standin()
    kinds = ["host"] + (["device"] if standin.ok else [])
    stream = standin.stream_new() if standin.ok and standin.has_streams and probe.has_stream_mode else None
    count = int(os.environ.get("GPTEST_TENSORS", "40"))
    for cipher in gt.CIPHERS:
        for kind in kinds:
            for pipeline in ([True, False] if probe.can_pipeline else [False]):
                for in_place in (True, False):
                    run_case(crypto, counting, cipher, kind, standin, pipeline, in_place, None, rng, count)
                if kind == "device" and stream:
                    run_case(crypto, counting, cipher, kind, standin, pipeline, True, stream, rng, count)
    if stream:
        standin.stream_free(stream)
    kept_contexts(crypto, standin, probe, rng)
    if standin.ok:
        torch_like(crypto, standin, probe, rng)
    # Bad input: clean Python errors, nothing encrypted.
    c = gt.TensorCipher(bytes(32), libcrypto=crypto)
    for bad, what in (([object()], "not a tensor"), ([b"read-only"], "a read-only buffer")):
        try:
            c.encrypt(bad)
            check(False, "%s accepted" % what)
        except ValueError:
            pass
    try:
        gt.TensorCipher(bytes(16))
        check(False, "a 16-byte key accepted")
    except ValueError:
        pass
    if standin.ok:
        ref = gt.TensorCipher(bytes(32), provider="default", libcrypto=crypto)
        t = ft.FakeCudaTensor(standin, (16,))
        try:
            ref.encrypt([t])
            check(False, "device memory accepted by the default provider")
        except ValueError:
            pass
        t.free()
    print("test_tensors: %s" % ("%d failure(s)" % len(failures) if failures else "all passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
