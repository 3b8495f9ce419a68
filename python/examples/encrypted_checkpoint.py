#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Example: save and load a model's state_dict as an encrypted checkpoint, each tensor encrypted on its GPU through gpuprov (python/gpuprov_tensors.py); any changed byte of the file is refused.
"""usage:
  encrypted_checkpoint.py keygen KEYFILE                 a random 32-byte key (mode 0600)
  encrypted_checkpoint.py save MODEL.pt OUT.gpck         torch.load a state_dict, write it encrypted
  encrypted_checkpoint.py load IN.gpck OUT.pt [--device cuda|cpu]
  encrypted_checkpoint.py demo [--backend torch|cupy|host|standin]
      a small state_dict saved, loaded, compared, then one byte changed and the load refused
  key: --key-file FILE (32 raw bytes or 64 hex digits), else $GPUPROV_CHECKPOINT_KEY (64 hex
  digits); "demo" makes one up. The key is never written to the checkpoint.
  OPENSSL_MODULES: the directory holding gpuprov.so; --cipher ChaCha20-Poly1305 (default AES-256-GCM).

File layout (all integers little-endian):
  "GPCKPT01" | salt (32 random bytes) | header length (8) | header (JSON) | MAC (32) | ciphertexts
- Keys: from the master key and the file's salt, HKDF-SHA256 (RFC 5869) derives a tensor key and a
  header key of this file alone, so that the per-key message limit of random nonces
  (gpuprov_tensors: 2^32) counts one file's tensors, and no two files share a key.
- header: {"format", "version", "cipher", "tensors": [{"name", "shape", "dtype", "nbytes",
  "nonce", "tag"}]} in file order; the ciphertexts follow in that order, back to back.
- MAC: HMAC-SHA256 under the header key over every byte before it (magic, salt, length, header):
  checked, in constant time, before the header is parsed. The nonces and tags are in the header,
  so a changed nonce or tag is caught there as well as by the tensor's own tag.
- Each tensor is one AEAD message (gpuprov_tensors) whose AAD is the salt, its index, name, shape
  and dtype: a ciphertext moved to another place, or to another file, fails its tag.
- The file's length must be exactly the header's total: a truncated or extended file is refused.
On load every tag is checked; a failure zeroes every decrypted tensor and raises CheckpointError.
"""
import hashlib
import hmac
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpuprov_tensors as gt   # noqa: E402

MAGIC = b"GPCKPT01"
SALT_BYTES, MAC_BYTES = 32, 32
MAX_HEADER_BYTES = 64 << 20
PIPE_GROUP = gt.MAX_PIPES   # tensors encrypted (and held in GPU scratch) at once while saving


class CheckpointError(Exception):
    """The checkpoint is not one this key wrote, or was changed (nothing of it is returned)."""


def hkdf_sha256(key, salt, info, length=32):
    """RFC 5869, HKDF-Extract then HKDF-Expand with SHA-256."""
    prk = hmac.new(salt, key, hashlib.sha256).digest()
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        out, i = out + block, i + 1
    return out[:length]


def file_keys(key, salt):
    return (hkdf_sha256(key, salt, b"gpuprov checkpoint v1: tensors"),
            hkdf_sha256(key, salt, b"gpuprov checkpoint v1: header"))


def tensor_aad(salt, index, entry):
    return MAGIC + salt + json.dumps([index, entry["name"], entry["shape"], entry["dtype"]],
                                     separators=(",", ":")).encode()


# -- tensor libraries: what saving and loading need of each -------------------------------------

class TorchBackend:
    def __init__(self, device=None):
        import torch
        self.torch, self.device = torch, device

    def describe(self, t):
        return list(t.shape), str(t.dtype).replace("torch.", "")

    def empty_like(self, t):
        return self.torch.empty_like(t, memory_format=self.torch.contiguous_format)

    def to_host(self, t):
        """The tensor's bytes in host memory (a buffer)."""
        import ctypes
        h = t.detach().cpu().contiguous()
        return ctypes.string_at(h.data_ptr(), h.numel() * h.element_size()) if h.numel() else b""

    def from_host(self, data, shape, dtype, device=None):
        torch = self.torch
        dt = getattr(torch, dtype, None)
        if not isinstance(dt, torch.dtype):
            raise CheckpointError("unknown dtype %r" % dtype)
        device = device or self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if len(data) == 0:
            return torch.empty(shape, dtype=dt, device=device)
        t = torch.frombuffer(data, dtype=torch.uint8).view(dt).reshape(shape)
        return t.to(device)

    def synchronize(self):
        if self.torch.cuda.is_available():
            self.torch.cuda.synchronize()


class CupyBackend:
    def __init__(self, device=None):
        import cupy
        import numpy
        self.cupy, self.numpy = cupy, numpy

    def describe(self, t):
        return list(t.shape), str(t.dtype)

    def empty_like(self, t):
        return self.cupy.empty_like(t, order="C")

    def to_host(self, t):
        return t.get().tobytes()

    def from_host(self, data, shape, dtype, device=None):
        a = self.numpy.frombuffer(bytes(data), dtype=self.numpy.dtype(dtype)).reshape(shape)
        return self.cupy.asarray(a)

    def synchronize(self):
        self.cupy.cuda.get_current_stream().synchronize()


class FakeBackend:
    """Tests and CI: tensors of python/tests/fake_tensors.py, in the test module's stand-in device
    memory (device=True, GPUPROV_TEST_HOST_DEVMEM=1) or in host memory."""

    def __init__(self, device=True):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
        import fake_tensors
        self.ft, self.on_device, self.standin = fake_tensors, device, None

    def _standin(self):
        if self.standin is None:
            self.standin = self.ft.Standin()
            if not self.standin.ok:
                raise RuntimeError("the stand-in needs the test module and GPUPROV_TEST_HOST_DEVMEM=1")
        return self.standin

    def tensor(self, shape, typestr, data=None):
        if self.on_device:
            return self.ft.FakeCudaTensor(self._standin(), shape, typestr, data)
        return self.ft.HostTensor(shape, typestr, data)

    def describe(self, t):
        return list(t.shape), t.typestr

    def empty_like(self, t):
        return self.tensor(t.shape, t.typestr)

    def to_host(self, t):
        return t.read()

    def from_host(self, data, shape, dtype, device=None):
        if not isinstance(dtype, str) or len(dtype) < 3 or not dtype[2:].isdigit():
            raise CheckpointError("unknown dtype %r" % (dtype,))
        return self.tensor(tuple(shape), dtype, bytes(data))

    def synchronize(self):
        pass

    def free(self, t):
        t.free()


def backend_for(name=None):
    """The named backend, or the first of torch and cupy that imports; None if neither does."""
    if name == "standin":
        return FakeBackend(device=True)
    if name == "host":
        return FakeBackend(device=False)
    for n, cls in (("torch", TorchBackend), ("cupy", CupyBackend)):
        if name in (None, n):
            try:
                return cls()
            except ImportError:
                if name is not None:
                    raise
    return None


# -- the file -----------------------------------------------------------------------------------

def save(path, state_dict, key, backend, cipher="AES-256-GCM", libcrypto=None):
    """Write state_dict (name -> tensor) to path, encrypted under key (32 bytes)."""
    salt = os.urandom(SALT_BYTES)
    tkey, hkey = file_keys(bytes(key), salt)
    names = list(state_dict)
    entries, blobs = [], []
    with gt.TensorCipher(tkey, cipher, libcrypto=libcrypto) as c:
        for g in range(0, len(names), PIPE_GROUP):
            group = names[g:g + PIPE_GROUP]
            ts = [state_dict[n] for n in group]
            scratch = [backend.empty_like(t) for t in ts]    # the model itself stays as it is
            group_entries = []
            for k, (n, t) in enumerate(zip(group, ts)):
                shape, dtype = backend.describe(t)
                group_entries.append({"name": n, "shape": shape, "dtype": dtype})
            aads = [tensor_aad(salt, g + k, e) for k, e in enumerate(group_entries)]
            sealed = c.encrypt(ts, out=scratch, aads=aads, names=group)
            for e, s, sc in zip(group_entries, sealed, scratch):
                blob = backend.to_host(sc)
                e.update(nbytes=len(blob), nonce=s.nonce.hex(), tag=s.tag.hex())
                blobs.append(blob)
                if hasattr(backend, "free"):
                    backend.free(sc)
            entries += group_entries
    header = json.dumps({"format": "gpuprov-checkpoint", "version": 1, "cipher": cipher, "tensors": entries},
                        separators=(",", ":")).encode()
    pre = MAGIC + salt + struct.pack("<Q", len(header)) + header
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(pre + hmac.new(hkey, pre, hashlib.sha256).digest())
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def _read_exact(f, n):
    data = f.read(n)
    if len(data) != n:
        raise CheckpointError("file truncated")
    return data


def load(path, key, backend, device=None, libcrypto=None):
    """The state_dict (name -> tensor, on `device` or the backend's default) that path holds;
    CheckpointError if the key is not the one that wrote it or any byte of the file changed."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if _read_exact(f, len(MAGIC)) != MAGIC:
            raise CheckpointError("not a gpuprov checkpoint (magic)")
        salt = _read_exact(f, SALT_BYTES)
        (hlen,) = struct.unpack("<Q", _read_exact(f, 8))
        if hlen > min(MAX_HEADER_BYTES, size):
            raise CheckpointError("header length out of range")
        header = _read_exact(f, hlen)
        mac = _read_exact(f, MAC_BYTES)
        tkey, hkey = file_keys(bytes(key), salt)
        want = hmac.new(hkey, MAGIC + salt + struct.pack("<Q", hlen) + header, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, want):
            raise CheckpointError("header authentication failed (wrong key, or the header was changed)")
        # Authenticated: this key's writer made the header; it is still checked for shape.
        try:
            h = json.loads(header)
            cipher, entries = h["cipher"], h["tensors"]
            assert h["format"] == "gpuprov-checkpoint" and h["version"] == 1 and cipher in gt.CIPHERS
            for e in entries:
                assert isinstance(e["name"], str) and isinstance(e["nbytes"], int) and e["nbytes"] >= 0
                assert all(isinstance(d, int) and d >= 0 for d in e["shape"])
                e["sealed"] = gt.Sealed(bytes.fromhex(e["nonce"]), bytes.fromhex(e["tag"]))
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            raise CheckpointError("malformed header: %r" % (exc,)) from None
        if size != f.tell() + sum(e["nbytes"] for e in entries):
            raise CheckpointError("file length differs from the header's (truncated or extended)")
        tensors = []
        try:
            for e in entries:
                data = bytearray(e["nbytes"])
                if f.readinto(data) != e["nbytes"]:
                    raise CheckpointError("file truncated")
                tensors.append(backend.from_host(data, e["shape"], e["dtype"], device))
            names = [e["name"] for e in entries]
            with gt.TensorCipher(tkey, cipher, libcrypto=libcrypto) as c:
                for g in range(0, len(entries), PIPE_GROUP):
                    group = range(g, min(g + PIPE_GROUP, len(entries)))
                    c.decrypt([tensors[i] for i in group], [entries[i]["sealed"] for i in group],
                              aads=[tensor_aad(salt, i, entries[i]) for i in group],
                              names=[names[i] for i in group])
        except BaseException as exc:
            gt.zero(tensors)          # the groups decrypted before the failure too
            for t in tensors if hasattr(backend, "free") else ():
                backend.free(t)
            if isinstance(exc, gt.AuthenticationError):
                raise CheckpointError("tensor %s failed authentication: the file was changed"
                                      % ", ".join(repr(n) for n in exc.names)) from None
            raise
    return dict(zip(names, tensors))


# -- command line -------------------------------------------------------------------------------

def read_key(args):
    if "--key-file" in args:
        with open(args[args.index("--key-file") + 1], "rb") as f:
            raw = f.read()
        key = bytes.fromhex(raw.decode().strip()) if len(raw.strip()) == 64 else raw
    elif os.environ.get("GPUPROV_CHECKPOINT_KEY"):
        key = bytes.fromhex(os.environ["GPUPROV_CHECKPOINT_KEY"])
    else:
        sys.exit("encrypted_checkpoint.py: no key (--key-file FILE or $GPUPROV_CHECKPOINT_KEY)")
    if len(key) != 32:
        sys.exit("encrypted_checkpoint.py: the key must be 32 bytes")
    return key


def option(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def demo_state_dict(backend):
    """A small state_dict: a few layers of mixed sizes and dtypes."""
    if isinstance(backend, FakeBackend):
        shapes = [("conv.weight", (8, 3, 3, 3), "<f4"), ("conv.bias", (8,), "<f4"), ("bn.num_batches", (), "<i8"),
                  ("fc.weight", (10, 72), "<f2"), ("fc.bias", (10,), "<f4"), ("empty", (0,), "<f4")]
        sd = {}
        for i, (n, shape, ts) in enumerate(shapes):
            t = backend.tensor(shape, ts)
            t.write(bytes((i * 31 + j * 7) & 0xff for j in range(t.nbytes)))
            sd[n] = t
        return sd
    if isinstance(backend, TorchBackend):
        torch = backend.torch
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 30 * 30, 10)).to(dev)
        return {k: v.detach().contiguous() for k, v in m.state_dict().items()}
    cp = backend.cupy
    return {"w%d" % i: cp.arange(n, dtype=cp.float32) for i, n in enumerate((1, 100, 4096, 65536))}


def demo(args):
    backend = backend_for(option(args, "--backend"))
    if backend is None:
        print("encrypted_checkpoint.py: neither PyTorch nor CuPy is installed: nothing to run")
        return 0
    cipher = option(args, "--cipher", "AES-256-GCM")
    key = os.urandom(32)
    sd = demo_state_dict(backend)
    path = option(args, "--file", "/tmp/gpuprov-demo-%d.gpck" % os.getpid())
    save(path, sd, key, backend, cipher)
    back = load(path, key, backend)
    backend.synchronize()
    same = list(back) == list(sd) and all(backend.to_host(back[n]) == backend.to_host(sd[n]) for n in sd)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    with open(path, "wb") as f:
        f.write(data)
    try:
        load(path, key, backend)
        refused = None
    except CheckpointError as e:
        refused = str(e)
    os.unlink(path)
    if not same or refused is None:
        print("encrypted_checkpoint.py: FAILED (%s)" % ("round trip differs" if not same else "tampering accepted"))
        return 1
    print("encrypted_checkpoint.py: %d tensors saved and loaded with %s (%s); a changed byte refused: %s"
          % (len(sd), cipher, type(backend).__name__, refused))
    return 0


def main(argv):
    if len(argv) < 1 or argv[0] not in ("keygen", "save", "load", "demo"):
        print(__doc__)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "demo":
        return demo(args)
    if cmd == "keygen":
        fd = os.open(args[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(32).hex().encode() + b"\n")
        os.close(fd)
        return 0
    backend = TorchBackend(option(args, "--device"))
    torch = backend.torch
    if cmd == "save":
        sd = torch.load(args[0], map_location="cuda" if torch.cuda.is_available() else "cpu")
        save(args[1], {k: v.contiguous() for k, v in sd.items()}, read_key(args), backend,
             option(args, "--cipher", "AES-256-GCM"))
    else:
        try:
            sd = load(args[0], read_key(args), backend, option(args, "--device"))
        except CheckpointError as e:
            sys.exit("encrypted_checkpoint.py: %s: %s" % (args[0], e))
        torch.save(sd, args[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
