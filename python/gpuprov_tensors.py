# SPDX-License-Identifier: Apache-2.0
# Encrypts and decrypts lists of tensors (PyTorch, CuPy, anything with __cuda_array_interface__; host ones too) with AEAD through gpuprov, in pure Python over libcrypto (ctypes).
"""gpuprov_tensors: AES-256-GCM or ChaCha20-Poly1305 over many tensors where they live.

    import gpuprov_tensors as gt
    c = gt.TensorCipher(key)                       # 32 bytes; AES-256-GCM by default
    sealed = c.encrypt(tensors)                    # in place; [Sealed(nonce, tag)] one per tensor
    c.decrypt(tensors, sealed)                     # in place; AuthenticationError names the tensor

What it does with the tensors:
- Device tensors (PyTorch CUDA tensors, CuPy arrays, any object with __cuda_array_interface__)
  are encrypted on their GPU through gpuprov's device mode (`gpuprov-memory = device`): nothing is
  copied to the host. Host tensors (PyTorch CPU tensors, objects with __array_interface__,
  writable buffers) go through gpuprov on host memory (or any provider: provider="default").
  Every tensor must be contiguous. `out=` gives a second list of the same byte sizes on the same
  devices (out of place); without it the tensors are encrypted in place. In and out are the same
  buffer or do not overlap.
- One message per tensor, each under a fresh random 96-bit nonce drawn from libcrypto's DRBG
  (RAND_bytes). With random nonces NIST SP 800-38D, 8.3 limits a GCM key to 2^32 messages (the
  chance that two nonces collide then stays below 2^-32); the same bound is used for
  ChaCha20-Poly1305 (RFC 8439 leaves nonce choice to the caller; its nonce is also 96 bits). A
  TensorCipher counts its messages and refuses the 2^32-th; a key shared by several objects or
  processes is the caller's to count (or derive a key per file, as examples/encrypted_checkpoint.py
  does). One message is at most 2^36 - 32 bytes (GCM; ChaCha20-Poly1305: 2^38 - 64).
- AAD: each tensor's `aads[i]` (bytes), or by default `default_aad(tensor, name)`: its name (or
  index in the list), shape and dtype, so that a ciphertext moved to another tensor's place, or
  read back as another shape or dtype, fails its tag.
- Calls: on a libcrypto with OpenSSL 3.5's pipeline API, where EVP_CIPHER_can_pipeline says
  gpuprov's cipher takes it (detected at run time), one EVP_CipherPipeline{Encrypt,Decrypt}Init /
  Update / Final sequence per up to 32 tensors of one device (tensors above 1 GiB, and empty ones,
  go one at a time); on OpenSSL 3.0 (or pipeline=False), one EVP message per tensor. A
  TensorCipher keeps the EVP contexts of its calls (at most 16, each with its key and device
  mode set) for its next calls, which re-initialise them with new nonces only; close() frees them.
- Streams: where gpuprov has stream-ordered device mode (its settable context parameter
  "gpuprov-cuda-stream"), the work is queued on the caller's current stream (PyTorch's
  torch.cuda.current_stream().cuda_stream, CuPy's current stream; `stream=` gives one
  explicitly): it runs after the work queued there before the call and before the work queued
  after; encrypt() returns once the tags are known, decrypt() once every tag is checked, each
  waiting for its own messages only. Without that mode (or with stream=None) the caller's current
  stream is synchronised first and the calls are synchronous. Many tensors at once go faster with
  stream=None: a synchronous pipeline call is one batch, where a stream-ordered one runs its pipes
  one by one (docs/config.md, "stream-ordered device mode", Cost).
- Decryption checks every tag. If one fails, every output of the call is zeroed (no plaintext is
  left behind, the tensors that did verify included) and AuthenticationError names the tensors
  whose tag failed. Other failures raise GpuprovError with OpenSSL's error strings; an encryption
  in place that fails part-way (a GPU failure: device memory has no CPU fallback) may leave some
  tensors encrypted, so encrypt out of place where the plaintext must survive any failure.
"""

import collections
import ctypes
import ctypes.util
import itertools
import json
import os
import re
import threading

__all__ = ["TensorCipher", "Sealed", "zero", "AuthenticationError", "GpuprovError", "default_aad", "load_libcrypto",
           "CIPHERS", "MAX_PIPES", "NONCE_BYTES", "TAG_BYTES", "MAX_MESSAGES_PER_KEY"]

CIPHERS = ("AES-256-GCM", "ChaCha20-Poly1305")
KEY_BYTES, NONCE_BYTES, TAG_BYTES = 32, 12, 16
MAX_PIPES = 32                           # EVP_MAX_PIPES
MAX_MESSAGES_PER_KEY = 1 << 32           # random 96-bit nonces: SP 800-38D, 8.3
MAX_MESSAGE_BYTES = {"AES-256-GCM": (1 << 36) - 32, "ChaCha20-Poly1305": (1 << 38) - 64}
# One EVP update: EVP lengths are ints, and a multiple of 16 keeps every later update's address at
# the message's byte count modulo 16 (device mode works on such buffers in place).
UPDATE_BYTES = 1 << 30
_NONCE_CHUNK = 4096        # nonces per RAND_bytes call (48 KiB)
_KEPT_CONTEXTS = 16        # contexts a TensorCipher keeps between calls (each holds up to 32 pipes)

Sealed = collections.namedtuple("Sealed", "nonce tag")


class GpuprovError(RuntimeError):
    """A call into libcrypto failed; the message carries OpenSSL's error strings."""


class AuthenticationError(ValueError):
    """A tag did not verify. `names`: the tensors whose tag failed. Every output of the call is zeroed."""

    def __init__(self, names):
        self.names = list(names)
        super().__init__("authentication failed for %s; the call's outputs are zeroed"
                         % ", ".join(repr(n) for n in self.names))


class _Param(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("data_type", ctypes.c_uint), ("data", ctypes.c_void_p),
                ("data_size", ctypes.c_size_t), ("return_size", ctypes.c_size_t)]


# default_aad's bytes: json.dumps's with ensure_ascii (the default), so every byte is ASCII; the
# shape's entries are Python ints, which json writes as str() does.
_AAD_FORMAT = 'gpuprov-tensors/1\0{"dtype":%s,"name":%s,"shape":[%s]}'
_json_str = json.encoder.encode_basestring_ascii


_PARAM_UINT, _PARAM_UTF8, _PARAM_OCTET_PTR = 2, 4, 7
_CTRL_GET_TAG, _CTRL_SET_TAG = 0x10, 0x11
_VP, _SZ, _INT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int


def load_libcrypto(path=None):
    """libcrypto through ctypes: `path`, else $GPUPROV_LIBCRYPTO, else the one the loader finds
    (LD_LIBRARY_PATH picks a 3.5 build). The pipeline functions are bound only where they exist."""
    lib = ctypes.CDLL(path or os.environ.get("GPUPROV_LIBCRYPTO") or ctypes.util.find_library("crypto")
                      or "libcrypto.so.3")
    sigs = {
        "OpenSSL_version_num": (ctypes.c_ulong, []),
        "OSSL_PROVIDER_load": (_VP, [_VP, ctypes.c_char_p]),
        "EVP_CIPHER_fetch": (_VP, [_VP, ctypes.c_char_p, ctypes.c_char_p]),
        "EVP_CIPHER_free": (None, [_VP]),
        "EVP_CIPHER_settable_ctx_params": (_VP, [_VP]),
        "OSSL_PARAM_locate_const": (_VP, [_VP, ctypes.c_char_p]),
        "EVP_CIPHER_CTX_new": (_VP, []),
        "EVP_CIPHER_CTX_free": (None, [_VP]),
        "EVP_CIPHER_CTX_set_params": (_INT, [_VP, _VP]),
        "EVP_CIPHER_CTX_get_params": (_INT, [_VP, _VP]),
        "EVP_CipherInit_ex2": (_INT, [_VP, _VP, _VP, _VP, _INT, _VP]),
        "EVP_CipherUpdate": (_INT, [_VP, _VP, ctypes.POINTER(_INT), _VP, _INT]),
        "EVP_CipherFinal_ex": (_INT, [_VP, _VP, ctypes.POINTER(_INT)]),
        "EVP_CIPHER_CTX_ctrl": (_INT, [_VP, _INT, _INT, _VP]),
        "RAND_bytes": (_INT, [_VP, _INT]),
        "ERR_get_error_all": (ctypes.c_ulong, [_VP, _VP, _VP, ctypes.POINTER(ctypes.c_char_p), _VP]),
        "ERR_error_string_n": (None, [ctypes.c_ulong, ctypes.c_char_p, _SZ]),
        "ERR_clear_error": (None, []),
        # OpenSSL 3.5 and later:
        "EVP_CIPHER_can_pipeline": (_INT, [_VP, _INT]),
        "EVP_CipherPipelineEncryptInit": (_INT, [_VP, _VP, _VP, _SZ, _SZ, _VP, _SZ]),
        "EVP_CipherPipelineDecryptInit": (_INT, [_VP, _VP, _VP, _SZ, _SZ, _VP, _SZ]),
        "EVP_CipherPipelineUpdate": (_INT, [_VP, _VP, _VP, _VP, _VP, _VP]),
        "EVP_CipherPipelineFinal": (_INT, [_VP, _VP, _VP, _VP]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = res, args
    return lib


def _openssl_errors(crypto):
    """Drain the thread's OpenSSL error queue into one string (each error's text and data)."""
    out, buf = [], ctypes.create_string_buffer(256)
    while True:
        data = ctypes.c_char_p()
        code = crypto.ERR_get_error_all(None, None, None, ctypes.byref(data), None)
        if code == 0:
            return "; ".join(out) or "no OpenSSL error recorded"
        crypto.ERR_error_string_n(code, buf, len(buf))
        text = buf.value.decode(errors="replace")
        out.append(text + (" (%s)" % data.value.decode(errors="replace") if data.value else ""))


def _failed_pipes(errors, numpipes):
    """The pipes a failed pipeline Final names ("pipe 3", "pipes 0, 5, 17"); all of them if none."""
    found = set()
    for m in re.finditer(r"pipes? ((?:\d+)(?:, \d+)*)", errors):
        found.update(int(x) for x in m.group(1).split(", ") if int(x) < numpipes)
    return sorted(found) or list(range(numpipes))


class _Buf:
    """What the module needs of one tensor: address, bytes, where it lives, how to clear it."""
    __slots__ = ("obj", "ptr", "nbytes", "gpu", "kind", "shape", "dtype")

    def __init__(self, obj, ptr, nbytes, gpu, kind, shape, dtype):
        self.obj, self.ptr, self.nbytes, self.gpu, self.kind = obj, ptr, nbytes, gpu, kind
        self.shape, self.dtype = tuple(map(int, shape)), dtype

    def zero(self):
        """Clear the tensor (ordered on the caller's current stream for PyTorch and CuPy)."""
        if self.nbytes == 0:
            return
        if self.gpu is None and self.kind != "torch":
            ctypes.memset(self.ptr, 0, self.nbytes)
            return
        if self.kind == "torch":
            import torch
            with torch.no_grad():    # a parameter that requires grad takes an in-place write here
                self.obj.zero_()
            return
        for method, arg in (("zero_", ()), ("fill", (0,))):
            fn = getattr(self.obj, method, None)
            if callable(fn):
                fn(*arg)
                return
        cudart = ctypes.util.find_library("cudart")
        if cudart is None or ctypes.CDLL(cudart).cudaMemset(_VP(self.ptr), 0, _SZ(self.nbytes)) != 0:
            raise GpuprovError("cannot clear a device tensor of type %s (no zero_() or fill(), no cudart)"
                               % type(self.obj).__name__)


def _contiguous_strides(shape, itemsize):
    strides, step = [], itemsize
    for s in reversed(shape):
        strides.append(step)
        step *= int(s)
    return tuple(reversed(strides))


_typestr_sizes = {}   # typestr -> item size: a few distinct strings


def _typestr_size(typestr):
    size = _typestr_sizes.get(typestr)
    if size is None:
        size = _typestr_sizes[typestr] = int(typestr[2:]) if len(typestr) > 2 and typestr[2:].isdigit() else 1
    return size


_cai_kinds = {}       # type -> "cupy" or "cai"


def _cai_kind(cls):
    kind = _cai_kinds.get(cls)
    if kind is None:
        kind = _cai_kinds[cls] = "cupy" if cls.__module__.split(".")[0] == "cupy" else "cai"
    return kind


# PyTorch dtype -> its name without "torch.": dtypes are a few hashable singletons.
_torch_dtype_names = {}


def _torch_dtype_name(dtype):
    name = _torch_dtype_names.get(dtype)
    if name is None:
        name = _torch_dtype_names[dtype] = str(dtype).replace("torch.", "")
    return name


def _buf(t):
    """A _Buf for a PyTorch tensor, an object with __cuda_array_interface__ or __array_interface__,
    or a writable buffer; ValueError for anything else or a non-contiguous one."""
    if hasattr(t, "data_ptr") and hasattr(t, "element_size") and hasattr(t, "device"):   # PyTorch
        # Each attribute asked once: a PyTorch attribute is a call into C++ (t.device builds a
        # new torch.device each time).
        if not t.is_contiguous():
            raise ValueError("tensor is not contiguous (call .contiguous() first)")
        nbytes, dtype, device = t.numel() * t.element_size(), _torch_dtype_name(t.dtype), t.device
        where = device.type
        if where == "cuda":
            gpu = device.index
            return _Buf(t, t.data_ptr(), nbytes, 0 if gpu is None else gpu, "torch", t.shape, dtype)
        if where == "cpu":
            return _Buf(t, t.data_ptr(), nbytes, None, "torch", t.shape, dtype)
        raise ValueError("tensors on %s are not supported (cuda or cpu)" % where)
    for attr, on_gpu in (("__cuda_array_interface__", True), ("__array_interface__", False)):
        iface = getattr(t, attr, None)
        if iface is None:
            continue
        shape, typestr = tuple(iface["shape"]), iface["typestr"]
        itemsize = _typestr_size(typestr)
        nbytes = itemsize
        for s in shape:
            nbytes *= int(s)
        strides = iface.get("strides")
        if strides is not None and nbytes and tuple(strides) != _contiguous_strides(shape, itemsize):
            raise ValueError("tensor is not contiguous")
        ptr, readonly = iface["data"]
        if readonly:
            raise ValueError("tensor is read-only")
        if not on_gpu:
            return _Buf(t, ptr, nbytes, None, "host", shape, typestr)
        dev = getattr(t, "device", 0)
        dev = getattr(dev, "id", dev)    # CuPy: a Device; a fake tensor: an int
        gpu = dev if isinstance(dev, int) else 0
        return _Buf(t, ptr, nbytes, gpu, _cai_kind(type(t)), shape, typestr)
    try:
        view = memoryview(t)
    except TypeError:
        raise ValueError("not a tensor: %s (PyTorch, CuPy, __cuda_array_interface__, __array_interface__ "
                         "or a writable buffer)" % type(t).__name__) from None
    if view.readonly or not view.c_contiguous:
        raise ValueError("buffer is read-only or not contiguous")
    ptr = ctypes.addressof(ctypes.c_char.from_buffer(view)) if view.nbytes else 0
    return _Buf(t, ptr, view.nbytes, None, "host", view.shape or (view.nbytes,), view.format)


def default_aad(tensor, name):
    """The AAD a tensor gets by default: its name, shape and dtype (bytes, canonical JSON: the bytes
    of json.dumps({"name": str(name), "shape": list(shape), "dtype": dtype}, sort_keys=True,
    separators=(",", ":")), written out here key by key, sorted, as json.dumps writes them)."""
    b = tensor if isinstance(tensor, _Buf) else _buf(tensor)
    return (_AAD_FORMAT % (_json_str(b.dtype), _json_str(str(name)), ",".join(map(str, b.shape)))).encode("ascii")


def zero(tensors):
    """Clear each tensor (device ones on the caller's current stream where the library has one)."""
    for t in tensors:
        _buf(t).zero()


def _current_stream(b):
    """The caller's current CUDA stream for b's GPU (0 where the tensor's library is unknown)."""
    if b.kind == "torch":
        import torch
        s = torch.cuda.current_stream(b.obj.device).cuda_stream
    elif b.kind == "cupy":
        import cupy
        with cupy.cuda.Device(b.gpu):
            s = cupy.cuda.get_current_stream().ptr
    else:
        return 0
    return s or 1   # the legacy default stream: handle 0 is cudaStreamLegacy (1) to CUDA


def _synchronize_current(b):
    """Finish the caller's queued work on b's GPU before a synchronous device-mode call reads it."""
    if b.kind == "torch":
        import torch
        torch.cuda.current_stream(b.obj.device).synchronize()
    elif b.kind == "cupy":
        import cupy
        with cupy.cuda.Device(b.gpu):
            cupy.cuda.get_current_stream().synchronize()


class TensorCipher:
    """One key, one cipher, one provider: encrypt() and decrypt() lists of tensors.

    key: 32 bytes. cipher: "AES-256-GCM" or "ChaCha20-Poly1305". provider: "gpuprov" (or
    "default": host tensors only, the reference). pipeline: None (use it where available), False,
    True (require it). stream: "auto" (the caller's current stream where gpuprov takes streams),
    None (synchronous calls), or a cudaStream_t value for every call. libcrypto: a CDLL from
    load_libcrypto, else one is loaded.
    """

    def __init__(self, key, cipher="AES-256-GCM", provider="gpuprov", pipeline=None, stream="auto",
                 libcrypto=None):
        if cipher not in CIPHERS:
            raise ValueError("cipher must be one of %s" % ", ".join(CIPHERS))
        key = bytes(key)
        if len(key) != KEY_BYTES:
            raise ValueError("key must be %d bytes" % KEY_BYTES)
        self.cipher_name, self.provider, self.stream = cipher, provider, stream
        self._lock = threading.Lock()
        self._messages = 0
        self._kept = {}       # contexts kept for the next call (_ctx_take): slot -> [ctx]
        self._kept_pid = os.getpid()
        self._cipher = None
        self._key = ctypes.create_string_buffer(key, KEY_BYTES)
        self._crypto = crypto = libcrypto or load_libcrypto()
        self._providers = [crypto.OSSL_PROVIDER_load(None, p) for p in (provider.encode(), b"default")]
        if not self._providers[0]:
            raise GpuprovError("cannot load provider %s (OPENSSL_MODULES: the directory holding it): %s"
                               % (provider, _openssl_errors(crypto)))
        self._cipher = crypto.EVP_CIPHER_fetch(None, cipher.encode(), b"provider=" + provider.encode())
        if not self._cipher:
            raise GpuprovError("cannot fetch %s from %s: %s" % (cipher, provider, _openssl_errors(crypto)))
        can = getattr(crypto, "EVP_CIPHER_can_pipeline", None)
        self.can_pipeline = bool(can and hasattr(crypto, "EVP_CipherPipelineUpdate")
                                 and can(self._cipher, 1) == 1 and can(self._cipher, 0) == 1)
        if pipeline and not self.can_pipeline:
            raise GpuprovError("%s from %s has no pipeline here (OpenSSL %s)"
                               % (cipher, provider, self.openssl_version))
        self.pipelined = self.can_pipeline if pipeline is None else bool(pipeline)
        settable = crypto.EVP_CIPHER_settable_ctx_params(self._cipher)
        self.has_device_mode = bool(settable and crypto.OSSL_PARAM_locate_const(settable, b"gpuprov-memory"))
        self.has_stream_mode = bool(settable and crypto.OSSL_PARAM_locate_const(settable, b"gpuprov-cuda-stream"))
        self._stream_refused = False   # "auto": the executor here takes no streams

    @property
    def openssl_version(self):
        v = self._crypto.OpenSSL_version_num()
        return "%d.%d.%d" % (v >> 28, (v >> 20) & 0xff, (v >> 4) & 0xff)

    def close(self):
        with self._lock:
            kept, self._kept = (self._kept if self._kept_pid == os.getpid() else {}), {}
        for ctxs in kept.values():
            for ctx in ctxs:
                self._crypto.EVP_CIPHER_CTX_free(ctx)
        if self._cipher:
            self._crypto.EVP_CIPHER_free(self._cipher)
            self._cipher = None
        ctypes.memset(self._key, 0, KEY_BYTES)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- public calls ---------------------------------------------------------------------------

    def encrypt(self, tensors, out=None, aads=None, names=None, stream="default"):
        """Encrypt each tensor into out[i] (default: in place) under a fresh nonce; [Sealed]."""
        bufs, outs, aads, names = self._prepare(tensors, out, aads, names)
        with self._lock:
            if self._messages + len(bufs) >= MAX_MESSAGES_PER_KEY:
                raise GpuprovError("this key has sealed 2^32 messages under random nonces: use a new key")
            self._messages += len(bufs)
        nonces = self._nonces(len(bufs))
        tags = [None] * len(bufs)
        self._run(1, bufs, outs, aads, nonces, tags, names, stream)
        return [Sealed(n, t) for n, t in zip(nonces, tags)]

    def decrypt(self, tensors, sealed, out=None, aads=None, names=None, stream="default"):
        """Decrypt each tensor into out[i] (default: in place), checking sealed[i]'s tag; on a wrong
        tag every output is zeroed and AuthenticationError names the failed tensors."""
        bufs, outs, aads, names = self._prepare(tensors, out, aads, names)
        if len(sealed) != len(bufs):
            raise ValueError("one Sealed(nonce, tag) per tensor")
        nonces, tags = [], []
        for s in sealed:
            nonce, tag = bytes(s[0]), bytes(s[1])
            if len(nonce) != NONCE_BYTES or len(tag) != TAG_BYTES:
                raise ValueError("a nonce is %d bytes and a tag %d" % (NONCE_BYTES, TAG_BYTES))
            nonces.append(nonce)
            tags.append(tag)
        try:
            failed = self._run(0, bufs, outs, aads, nonces, tags, names, stream)
        except BaseException:
            for o in outs:
                o.zero()
            raise
        if failed:
            for o in outs:
                o.zero()
            raise AuthenticationError(names[i] for i in sorted(failed))

    # -- the work -------------------------------------------------------------------------------

    def _prepare(self, tensors, out, aads, names):
        bufs = [_buf(t) for t in tensors]
        outs = bufs if out is None else [_buf(t) for t in out]
        names = list(range(len(bufs))) if names is None else list(names)
        if len(outs) != len(bufs) or len(names) != len(bufs):
            raise ValueError("out and names need one entry per tensor")
        for i, (b, o) in enumerate(zip(bufs, outs)):
            if b.nbytes != o.nbytes or b.gpu != o.gpu:
                raise ValueError("tensor %r: out has another size or device" % (names[i],))
            if b.nbytes > MAX_MESSAGE_BYTES[self.cipher_name]:
                raise ValueError("tensor %r is larger than one %s message may be" % (names[i], self.cipher_name))
            if b.gpu is not None and not self.has_device_mode:
                raise ValueError("tensor %r is in GPU memory: provider %s has no device mode"
                                 % (names[i], self.provider))
        if aads is None:
            aads = [default_aad(b, n) for b, n in zip(bufs, names)]
        elif len(aads) != len(bufs):
            raise ValueError("one AAD per tensor")
        return bufs, outs, [bytes(a) for a in aads], names

    def _nonces(self, count):
        """count fresh random nonces, drawn from the DRBG in as few RAND_bytes calls as NONCE_CHUNK
        allows (one for up to 4,096 tensors): the same DRBG output, one call instead of one a tensor."""
        nonces = []
        for first in range(0, count, _NONCE_CHUNK):
            n = min(_NONCE_CHUNK, count - first) * NONCE_BYTES
            buf = ctypes.create_string_buffer(n)
            if self._crypto.RAND_bytes(buf, n) != 1:
                raise GpuprovError("RAND_bytes failed: %s" % _openssl_errors(self._crypto))
            raw = buf.raw
            nonces += [raw[k:k + NONCE_BYTES] for k in range(0, n, NONCE_BYTES)]
        return nonces

    def _ctx_take(self, slot):
        """A context kept by an earlier call for slot (kind, enc, gpu, stream[, numpipes]), or
        None. It has this object's cipher and key, and its slot's device mode and stream, set;
        re-initialised with a NULL cipher and key it keeps them (OpenSSL 3.5's
        evp_cipher_init_internal keeps a context's provider state unless it is given a cipher;
        gpuprov keeps the key, the pipeline and each pipe's lane context across inits of the same
        numpipes)."""
        with self._lock:
            if self._kept_pid != os.getpid():
                # A forked child: the parent's contexts (their keys, their executor's state) are
                # left alone, neither used nor freed; the child makes its own.
                self._kept, self._kept_pid = {}, os.getpid()
            ctxs = self._kept.get(slot)
            return ctxs.pop() if ctxs else None

    def _ctx_keep(self, slot, ctx):
        """Keep ctx, whose last message ended well, for the next call of its slot (at most
        _KEPT_CONTEXTS in all); else free it."""
        with self._lock:
            room = sum(map(len, self._kept.values())) < _KEPT_CONTEXTS
            if self._cipher and self._kept_pid == os.getpid() and room:
                self._kept.setdefault(slot, []).append(ctx)
                return
        self._crypto.EVP_CIPHER_CTX_free(ctx)

    def _run(self, enc, bufs, outs, aads, nonces, tags, names, stream):
        """Every tensor, grouped by device (one device per call: pipelines refuse mixed memory)
        and then in pipes of up to 32; returns the indices whose tag failed (decrypting)."""
        groups = collections.OrderedDict()
        for i, b in enumerate(bufs):
            groups.setdefault(b.gpu, []).append(i)
        failed, pending = [], []
        try:
            for gpu, idx in groups.items():
                s = self._stream_for(bufs[idx[0]], stream) if gpu is not None else (0, False)
                if self.pipelined:
                    piped = [i for i in idx if 0 < bufs[i].nbytes <= UPDATE_BYTES]
                    single = [i for i in idx if not 0 < bufs[i].nbytes <= UPDATE_BYTES]
                    for k in range(0, len(piped), MAX_PIPES):
                        group = piped[k:k + MAX_PIPES]
                        failed += self._pipeline(enc, group, bufs, outs, aads, nonces, tags, gpu, s, pending)
                else:
                    single = idx
                if single:
                    failed += self._messages_one_by_one(enc, single, bufs, outs, aads, nonces, tags, gpu, s,
                                                        pending)
        except BaseException:
            for finish in pending:
                finish(abandon=True)
            raise
        # Encrypting, the tags of stream-ordered pipelines and messages are read once every group
        # is queued: such a read waits for its own work, and the work behind it is queued.
        first_error = None
        for finish in pending:
            try:
                finish()
            except GpuprovError as e:
                first_error = first_error or e
        if first_error:
            raise first_error
        return failed

    def _stream_for(self, b, stream):
        """(stream, chosen by "auto") to queue b's GPU work on; stream 0: synchronous calls, the
        caller's current stream finished first."""
        stream = self.stream if isinstance(stream, str) and stream == "default" else stream
        s, auto = 0, isinstance(stream, str) and stream == "auto"
        if stream is not None and self.has_stream_mode and not (auto and self._stream_refused):
            s = _current_stream(b) if auto else int(stream)
        if s == 0:
            _synchronize_current(b)
        return s, auto

    def _device_params(self, ctx, gpu, stream, b):
        """gpuprov-memory = device (and the stream) on ctx; the stream set (0: none). A stream
        chosen by "auto" that this build's executor refuses (no streams here): synchronise the
        caller's and go on without."""
        if gpu is None:
            return 0
        crypto, (s, auto) = self._crypto, stream
        mode = ctypes.create_string_buffer(b"device")
        sval = ctypes.c_uint64(s)
        params = (_Param * 3)()
        params[0] = _Param(b"gpuprov-memory", _PARAM_UTF8, ctypes.addressof(mode), 6, 0)
        if s:
            params[1] = _Param(b"gpuprov-cuda-stream", _PARAM_UINT, ctypes.addressof(sval), 8, 0)
        if crypto.EVP_CIPHER_CTX_set_params(ctx, params) == 1:
            return s
        errs = _openssl_errors(crypto)
        if s and auto and "needs the cuda executor" in errs:
            self._stream_refused = True
            params[1] = _Param()
            _synchronize_current(b)
            if crypto.EVP_CIPHER_CTX_set_params(ctx, params) == 1:
                return 0
            errs = _openssl_errors(crypto)
        raise GpuprovError("device mode refused: %s" % errs)

    def _fail(self, what):
        errs = _openssl_errors(self._crypto)
        raise GpuprovError("%s %s through %s failed: %s" % (self.cipher_name, what, self.provider, errs))

    def _messages_one_by_one(self, enc, idx, bufs, outs, aads, nonces, tags, gpu, s, pending):
        """One EVP message per tensor; decrypting: the indices whose tag failed. Encrypting in
        stream-ordered mode each message gets a context of its own, whose tag is read (a wait)
        after every message is queued (pending, as _pipeline's); otherwise one context serves all,
        kept from an earlier call where there is one (_ctx_take) and kept for the next."""
        crypto, n = self._crypto, _INT()
        nref = ctypes.byref(n)
        failed, ctx, own, slot, done = [], None, False, None, False
        scratch, tagbuf = ctypes.create_string_buffer(32), ctypes.create_string_buffer(TAG_BYTES)
        try:
            for i in idx:
                b, o = bufs[i], outs[i]
                if ctx is None:
                    slot = ("message", enc, gpu, s[0])
                    if not (enc and gpu is not None and s[0]):   # a context for every message
                        ctx = self._ctx_take(slot)
                    if ctx is None:
                        ctx = crypto.EVP_CIPHER_CTX_new() or self._fail("EVP_CIPHER_CTX_new")
                        if crypto.EVP_CipherInit_ex2(ctx, self._cipher, self._key, None, enc, None) != 1:
                            self._fail("init")
                        slot = ("message", enc, gpu, self._device_params(ctx, gpu, s, b))
                    own = bool(enc and gpu is not None and s[0] and not (s[1] and self._stream_refused))
                ok = crypto.EVP_CipherInit_ex2(ctx, None, None, nonces[i], enc, None) == 1
                ok = ok and (not aads[i] or crypto.EVP_CipherUpdate(ctx, None, nref, aads[i], len(aads[i])) == 1)
                if ok and not enc:
                    tagbuf.raw = tags[i]
                    ok = crypto.EVP_CIPHER_CTX_ctrl(ctx, _CTRL_SET_TAG, TAG_BYTES, tagbuf) == 1
                for off in range(0, b.nbytes, UPDATE_BYTES):
                    ok = ok and crypto.EVP_CipherUpdate(ctx, o.ptr + off, nref, b.ptr + off,
                                                        min(UPDATE_BYTES, b.nbytes - off)) == 1
                if not ok:
                    self._fail("update of tensor %r" % (i,))
                if crypto.EVP_CipherFinal_ex(ctx, scratch, nref) != 1:
                    if enc:
                        self._fail("final")
                    _openssl_errors(crypto)
                    failed.append(i)
                elif own:
                    pending.append(self._tag_reader(ctx, i, tags))
                    ctx = None
                elif enc:
                    if crypto.EVP_CIPHER_CTX_ctrl(ctx, _CTRL_GET_TAG, TAG_BYTES, tagbuf) != 1:
                        self._fail("tag")
                    tags[i] = tagbuf.raw
            done = True
        finally:
            if ctx and done:
                self._ctx_keep(slot, ctx)
            elif ctx:
                crypto.EVP_CIPHER_CTX_free(ctx)
        return failed

    def _tag_reader(self, ctx, i, tags):
        """finish(): tags[i] from ctx (GET_TAG waits for its message), then ctx freed."""
        crypto = self._crypto

        def finish(abandon=False):
            try:
                buf = ctypes.create_string_buffer(TAG_BYTES)
                if not abandon:
                    if crypto.EVP_CIPHER_CTX_ctrl(ctx, _CTRL_GET_TAG, TAG_BYTES, buf) != 1:
                        self._fail("tag")
                    tags[i] = buf.raw
            finally:
                crypto.EVP_CIPHER_CTX_free(ctx)
        return finish

    def _pipeline(self, enc, idx, bufs, outs, aads, nonces, tags, gpu, s, pending):
        """One pipeline sequence over the tensors idx (at most 32), on a context kept from an
        earlier call where there is one. Decrypting: the indices whose tag failed. Encrypting: [];
        the tags are read at once where the calls are synchronous (Final has made them), else by a
        function appended to pending (finish(abandon=True) only lets the context go)."""
        crypto, np_ = self._crypto, len(idx)
        ptrs, sizes = _VP * np_, _SZ * np_
        # One buffer each for the call's nonces, AADs and tags; the pipes point into them.
        aad_list = [aads[i] for i in idx]
        aad_lens = [len(a) for a in aad_list]
        ivbuf = ctypes.create_string_buffer(b"".join([nonces[i] for i in idx]), NONCE_BYTES * np_)
        aadbuf = ctypes.create_string_buffer(b"".join(aad_list), max(1, sum(aad_lens)))
        tagbuf = ctypes.create_string_buffer(b"" if enc else b"".join([tags[i] for i in idx]), TAG_BYTES * np_)
        base = ctypes.addressof(ivbuf)
        ivs = ptrs(*range(base, base + NONCE_BYTES * np_, NONCE_BYTES))
        aadp = ptrs(*itertools.accumulate([ctypes.addressof(aadbuf)] + aad_lens[:-1]))
        aadl = sizes(*aad_lens)
        base = ctypes.addressof(tagbuf)
        tagp = ptrs(*range(base, base + TAG_BYTES * np_, TAG_BYTES))
        ins, inl = ptrs(*[bufs[i].ptr for i in idx]), sizes(*[bufs[i].nbytes for i in idx])
        outp, outl = ptrs(*[outs[i].ptr for i in idx]), sizes()
        tagp_ref = ctypes.c_void_p(ctypes.addressof(tagp))
        tag_param = (_Param * 2)()
        tag_param[0] = _Param(b"pipeline-tag", _PARAM_OCTET_PTR, ctypes.addressof(tagp_ref), TAG_BYTES, 0)
        init = crypto.EVP_CipherPipelineEncryptInit if enc else crypto.EVP_CipherPipelineDecryptInit
        slot = ("pipeline", enc, gpu, s[0], np_)   # numpipes too: gpuprov keeps a pipeline of the same count
        ctx = self._ctx_take(slot)
        if ctx is not None and init(ctx, None, None, 0, np_, ivs, NONCE_BYTES) != 1:
            _openssl_errors(crypto)   # not expected: a fresh context instead
            crypto.EVP_CIPHER_CTX_free(ctx)
            ctx = None
        if ctx is None:
            ctx = crypto.EVP_CIPHER_CTX_new() or self._fail("EVP_CIPHER_CTX_new")
            if init(ctx, self._cipher, self._key, KEY_BYTES, np_, ivs, NONCE_BYTES) != 1:
                crypto.EVP_CIPHER_CTX_free(ctx)
                self._fail("pipeline init")
            try:
                slot = ("pipeline", enc, gpu, self._device_params(ctx, gpu, s, bufs[idx[0]]), np_)
            except BaseException:
                crypto.EVP_CIPHER_CTX_free(ctx)
                raise
        keep = [ivbuf, aadbuf, tagbuf, tagp, tagp_ref]   # what the context's calls point at

        def finish(abandon=False):
            read = False
            try:
                if not abandon:
                    if crypto.EVP_CIPHER_CTX_get_params(ctx, tag_param) != 1:
                        self._fail("pipeline tags")
                    raw = tagbuf.raw
                    for k, i in enumerate(idx):
                        tags[i] = raw[k * TAG_BYTES:(k + 1) * TAG_BYTES]
                    read = True
            finally:
                if read:
                    self._ctx_keep(slot, ctx)
                else:
                    crypto.EVP_CIPHER_CTX_free(ctx)
                del keep[:]

        handed = False
        try:
            if crypto.EVP_CipherPipelineUpdate(ctx, None, outl, None, aadp, aadl) != 1:
                self._fail("pipeline AAD")
            if crypto.EVP_CipherPipelineUpdate(ctx, outp, outl, inl, ins, inl) != 1:
                self._fail("pipeline update")
            if not enc and crypto.EVP_CIPHER_CTX_set_params(ctx, tag_param) != 1:
                self._fail("pipeline tags")
            if crypto.EVP_CipherPipelineFinal(ctx, outp, outl, sizes()) != 1:
                if enc:
                    self._fail("pipeline final")
                return [idx[p] for p in _failed_pipes(_openssl_errors(crypto), np_)]
            handed = True
            if not enc:
                self._ctx_keep(slot, ctx)
            elif slot[3]:
                pending.append(finish)   # stream-ordered: the read waits for the work
            else:
                finish()                 # synchronous: Final has made the tags
        finally:
            if not handed:
                crypto.EVP_CIPHER_CTX_free(ctx)
        return []
