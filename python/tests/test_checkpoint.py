#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# examples/encrypted_checkpoint.py: round trip, and every changed byte of the file (header, MAC, data), truncation, extension, swapped ciphertexts and a wrong key refused.
"""Run by meson (python/meson.build): stand-in device tensors where GPUPROV_TEST_HOST_DEVMEM=1,
host tensors otherwise (argument "host" forces them)."""
import os
import random
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(here), "examples"), os.path.dirname(here), here]
import encrypted_checkpoint as ec   # noqa: E402
import gpuprov_tensors as gt        # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def refused(path, key, backend, what):
    try:
        sd = ec.load(path, key, backend)
    except ec.CheckpointError:
        return True
    check(False, "%s accepted" % what)
    for t in sd.values():
        backend.free(t)
    return False


def main():
    on_device = "host" not in sys.argv[1:] and bool(os.environ.get("GPUPROV_TEST_HOST_DEVMEM"))
    crypto = gt.load_libcrypto()
    gt.TensorCipher(bytes(32), libcrypto=crypto).close()   # loads gpuprov before the stand-in is asked
    backend = ec.FakeBackend(device=on_device)
    rng = random.Random(int(os.environ.get("GPTEST_SEED", "51")))
    key = bytes(rng.getrandbits(8) for _ in range(32))
    tmp = tempfile.mkdtemp()
    for cipher in gt.CIPHERS:
        sd = ec.demo_state_dict(backend)
        # Two tensors of one size, for the swap; and more than one pipeline group of tensors.
        sd["twin.a"] = backend.tensor((24,), "<f4", bytes(range(96)))
        sd["twin.b"] = backend.tensor((24,), "<f4", bytes(range(100, 196)))
        for i in range(ec.PIPE_GROUP):
            sd["extra.%d" % i] = backend.tensor((i + 1,), "|u1", bytes([i]) * (i + 1))
        plain = {n: backend.to_host(t) for n, t in sd.items()}
        path = os.path.join(tmp, "model-%s.gpck" % cipher)
        ec.save(path, sd, key, backend, cipher, libcrypto=crypto)
        check({n: backend.to_host(t) for n, t in sd.items()} == plain, "%s: save changed the model" % cipher)
        blob = open(path, "rb").read()
        check(key not in blob and key.hex().encode() not in blob, "%s: the key is in the file" % cipher)
        back = ec.load(path, key, backend, libcrypto=crypto)
        check(list(back) == list(sd) and {n: backend.to_host(t) for n, t in back.items()} == plain,
              "%s: round trip differs" % cipher)
        for t in back.values():
            backend.free(t)
        # Changed bytes: every byte of the magic, salt, length and MAC and of the header's first
        # 256, 256 more of the header at random, each tensor's first and last byte and one between
        # (GPTEST_EVERY_BYTE=1: every byte of the file).
        import json
        import struct
        hlen = struct.unpack("<Q", blob[40:48])[0]
        entries = json.loads(blob[48:48 + hlen])["tensors"]
        off, offsets = 48 + hlen + 32, {}
        for e in entries:
            offsets[e["name"]] = (off, e["nbytes"])
            off += e["nbytes"]
        if os.environ.get("GPTEST_EVERY_BYTE") == "1":
            positions = range(len(blob))
        else:
            positions = set(range(48 + 256)) | set(range(48 + hlen, 48 + hlen + 32))
            positions |= set(rng.sample(range(48, 48 + hlen), 256))
            for o, n in offsets.values():
                if n:
                    positions |= {o, o + n - 1, o + rng.randrange(n)}
            positions = sorted(positions)
        bad = os.path.join(tmp, "bad.gpck")
        for pos in positions:
            x = bytearray(blob)
            x[pos] ^= rng.randrange(1, 256)
            open(bad, "wb").write(x)
            if not refused(bad, key, backend, "%s: byte %d of %d changed" % (cipher, pos, len(blob))):
                break
        for cut in (0, 7, 40, 48, 60, len(blob) - 33, len(blob) - 1):
            open(bad, "wb").write(blob[:cut])
            refused(bad, key, backend, "%s: truncated to %d bytes" % (cipher, cut))
        open(bad, "wb").write(blob + b"\0")
        refused(bad, key, backend, "%s: a byte appended" % cipher)
        # The two same-sized ciphertexts swapped in the data.
        (a, n), (b, _) = offsets["twin.a"], offsets["twin.b"]
        x = bytearray(blob)
        x[a:a + n], x[b:b + n] = blob[b:b + n], blob[a:a + n]
        open(bad, "wb").write(x)
        try:
            ec.load(bad, key, backend)
            check(False, "%s: swapped ciphertexts accepted" % cipher)
        except ec.CheckpointError as e:
            check("twin.a" in str(e) and "twin.b" in str(e), "%s: the swap's error names %s" % (cipher, e))
        # A header re-serialised with the same content (whitespace), MAC kept.
        h = blob[48:48 + hlen].replace(b'"version":1', b'"version": 1')
        open(bad, "wb").write(blob[:40] + struct.pack("<Q", len(h)) + h + blob[48 + hlen:])
        refused(bad, key, backend, "%s: a header re-serialised" % cipher)
        refused(path, bytes(31) + b"\1", backend, "%s: another key" % cipher)
        for t in sd.values():
            backend.free(t)
        print("%s: %d-byte checkpoint of %d tensors (%s); %d single-byte changes refused"
              % (cipher, len(blob), len(sd), "stand-in device memory" if on_device else "host memory",
                 len(positions)))
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
    print("test_checkpoint: %s" % ("%d failure(s)" % len(failures) if failures else "all passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
