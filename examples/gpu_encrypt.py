#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Example: encrypt a CuPy array or PyTorch tensor in GPU memory with AES-256-GCM, in place, through
# libcrypto's EVP API (ctypes) and gpuprov's device mode; checked against the default provider.
#
# usage: OPENSSL_MODULES=build/provider python3 examples/gpu_encrypt.py [cupy|torch|standin] [MiB]
# The default picks CuPy, else PyTorch. "standin" takes the test module's fake device memory
# (OPENSSL_MODULES=build/provider/test-module GPUPROV_BACKEND=host GPUPROV_TEST_HOST_DEVMEM=1): how
# CI runs this file without a GPU (examples/meson.build). Without any of them it says so and exits 0.
import ctypes
import ctypes.util
import os
import sys


class OSSL_PARAM(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("data_type", ctypes.c_uint), ("data", ctypes.c_void_p),
                ("data_size", ctypes.c_size_t), ("return_size", ctypes.c_size_t)]


OSSL_PARAM_UTF8_STRING = 4
EVP_CTRL_AEAD_GET_TAG, EVP_CTRL_AEAD_SET_TAG = 0x10, 0x11

crypto = ctypes.CDLL(ctypes.util.find_library("crypto") or "libcrypto.so.3")
crypto.OSSL_PROVIDER_load.restype = ctypes.c_void_p
crypto.OSSL_PROVIDER_load.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
crypto.EVP_CIPHER_fetch.restype = ctypes.c_void_p
crypto.EVP_CIPHER_fetch.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
crypto.EVP_CIPHER_free.argtypes = [ctypes.c_void_p]
crypto.EVP_CIPHER_CTX_new.restype = ctypes.c_void_p
crypto.EVP_CIPHER_CTX_free.argtypes = [ctypes.c_void_p]
crypto.EVP_CipherInit_ex2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_int, ctypes.POINTER(OSSL_PARAM)]
crypto.EVP_CipherUpdate.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                                    ctypes.c_void_p, ctypes.c_int]
crypto.EVP_CipherFinal_ex.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
crypto.EVP_CIPHER_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]


def aes256gcm(provider, enc, key, iv, ptr, nbytes, tag=None, device=True):
    """Encrypt (enc=1) or decrypt in place the nbytes at address ptr; returns the tag (encrypt) or
    whether it matched (decrypt). device=True: ptr is GPU memory (gpuprov's device mode)."""
    cipher = crypto.EVP_CIPHER_fetch(None, b"AES-256-GCM", b"provider=" + provider)
    ctx = crypto.EVP_CIPHER_CTX_new()
    params, mode = (OSSL_PARAM * 2)(), ctypes.create_string_buffer(b"device")
    if device:
        params[0] = OSSL_PARAM(b"gpuprov-memory", OSSL_PARAM_UTF8_STRING, ctypes.addressof(mode), 6, 0)
    n, last, tagbuf = ctypes.c_int(), ctypes.create_string_buffer(16), ctypes.create_string_buffer(tag or b"", 16)
    ok = cipher and ctx and crypto.EVP_CipherInit_ex2(ctx, cipher, key, iv, enc, params) == 1
    if ok and not enc:
        ok = crypto.EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, tagbuf) == 1
    step = 256 << 20   # EVP lengths are ints
    for off in range(0, nbytes, step):
        ok = ok and crypto.EVP_CipherUpdate(ctx, ptr + off, ctypes.byref(n), ptr + off, min(step, nbytes - off)) == 1
    ok = ok and crypto.EVP_CipherFinal_ex(ctx, last, ctypes.byref(n)) == 1
    if ok and enc:
        ok = crypto.EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tagbuf) == 1
    crypto.EVP_CIPHER_CTX_free(ctx)
    crypto.EVP_CIPHER_free(cipher)
    if enc and not ok:
        raise RuntimeError("AES-256-GCM through %s failed" % provider.decode())
    return tagbuf.raw if enc else ok


def gpu_buffer(kind, nbytes):
    """(address, read-back function, keep-alive object) of nbytes of GPU memory holding a pattern."""
    if kind == "cupy":
        import cupy
        a = cupy.arange(nbytes, dtype=cupy.uint32).astype(cupy.uint8)
        cupy.cuda.runtime.deviceSynchronize()   # the buffer must be ready before gpuprov reads it
        return a.data.ptr, lambda: a.get().tobytes(), a
    if kind == "torch":
        import torch
        t = torch.arange(nbytes, dtype=torch.int32, device="cuda").to(torch.uint8)
        torch.cuda.synchronize()
        return t.data_ptr(), lambda: t.cpu().numpy().tobytes(), t
    module = os.path.join(os.environ.get("OPENSSL_MODULES", "."), "gpuprov.so")
    lib = ctypes.CDLL(module, mode=os.RTLD_NOLOAD | os.RTLD_NOW)   # loaded by OpenSSL already
    lib.gpuprov_test_devmem_alloc.restype = ctypes.c_void_p
    lib.gpuprov_test_devmem_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int]
    ptr = lib.gpuprov_test_devmem_alloc(nbytes, 0)
    ctypes.memmove(ptr, bytes(i % 256 for i in range(nbytes)), nbytes)
    return ptr, lambda: ctypes.string_at(ptr, nbytes), lib


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else None
    nbytes = (int(sys.argv[2]) if len(sys.argv) > 2 else 64) << 20
    if kind is None:
        for k in ("cupy", "torch"):
            try:
                __import__(k)
                kind = k
                break
            except ImportError:
                pass
    if kind is None:
        print("gpu_encrypt.py: neither CuPy nor PyTorch is installed: nothing to run")
        return 0
    if not crypto.OSSL_PROVIDER_load(None, b"gpuprov") or not crypto.OSSL_PROVIDER_load(None, b"default"):
        sys.exit("gpu_encrypt.py: cannot load gpuprov (OPENSSL_MODULES: the directory holding gpuprov.so)")
    key, iv = bytes(range(32)), b"\x5a" * 12
    ptr, read_back, keep = gpu_buffer(kind, nbytes)
    plain = read_back()
    tag = aes256gcm(b"gpuprov", 1, key, iv, ptr, nbytes)          # in place, on the GPU
    # The default provider on a host copy must give the same ciphertext and tag.
    host = ctypes.create_string_buffer(plain, nbytes)
    ref_tag = aes256gcm(b"default", 1, key, iv, ctypes.addressof(host), nbytes, device=False)
    if read_back() != host.raw[:nbytes] or tag != ref_tag:
        sys.exit("gpu_encrypt.py: gpuprov's device-mode output differs from the default provider's")
    if not aes256gcm(b"gpuprov", 0, key, iv, ptr, nbytes, tag) or read_back() != plain:
        sys.exit("gpu_encrypt.py: decryption did not restore the data")
    print("gpu_encrypt.py: %d MiB of %s memory encrypted and decrypted in place with AES-256-GCM through "
          "gpuprov; matches the default provider" % (nbytes >> 20, kind))
    del keep
    return 0


if __name__ == "__main__":
    sys.exit(main())
