# SPDX-License-Identifier: Apache-2.0
# Tests' tensors without a GPU or PyTorch: "device" tensors over the test module's stand-in device memory (__cuda_array_interface__), host tensors (__array_interface__), and the stand-in's fake streams.
import ctypes
import os


class Standin:
    """The test module's exports (provider/test-module/gpuprov-test.map): stand-in device memory
    (gpuprov_test_devmem_alloc, GPUPROV_TEST_HOST_DEVMEM=1) and fake CUDA streams
    (batching/fake_stream.h), from $OPENSSL_MODULES/gpuprov.so: the same file, so the same loaded
    module, that OpenSSL loads."""

    def __init__(self):
        path = os.path.join(os.environ.get("OPENSSL_MODULES", "."), "gpuprov.so")
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW)
        self.ok = hasattr(lib, "gpuprov_test_devmem_alloc") and bool(os.environ.get("GPUPROV_TEST_HOST_DEVMEM"))
        if not self.ok:
            return
        lib.gpuprov_test_devmem_alloc.restype = ctypes.c_void_p
        lib.gpuprov_test_devmem_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int]
        lib.gpuprov_test_devmem_free.argtypes = [ctypes.c_void_p]
        self.has_streams = hasattr(lib, "gpuprov_test_stream_new")   # builds with stream-ordered mode
        if self.has_streams:
            lib.gpuprov_test_stream_new.restype = ctypes.c_void_p
            for f in ("free", "sync"):
                getattr(lib, "gpuprov_test_stream_" + f).argtypes = [ctypes.c_void_p]
        self.lib = lib

    def alloc(self, nbytes, gpu=0):
        p = self.lib.gpuprov_test_devmem_alloc(max(nbytes, 1), gpu)
        assert p, "stand-in device memory exhausted"
        return p

    def free(self, p):
        self.lib.gpuprov_test_devmem_free(p)

    def stream_new(self):
        return self.lib.gpuprov_test_stream_new()

    def stream_sync(self, s):
        self.lib.gpuprov_test_stream_sync(s)

    def stream_free(self, s):
        self.lib.gpuprov_test_stream_free(s)


def _nbytes(shape, typestr):
    n = int(typestr[2:])
    for s in shape:
        n *= s
    return n


class FakeCudaTensor:
    """A contiguous tensor in stand-in device memory, seen through __cuda_array_interface__ (v3)."""

    def __init__(self, standin, shape, typestr="|u1", data=None, gpu=0):
        self.standin, self.shape, self.typestr, self.device = standin, tuple(shape), typestr, gpu
        self.nbytes = _nbytes(self.shape, typestr)
        self.ptr = standin.alloc(self.nbytes, gpu)
        if data is not None:
            self.write(data)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": None}

    def write(self, data):
        assert len(data) == self.nbytes
        ctypes.memmove(self.ptr, bytes(data), self.nbytes)

    def read(self):
        return ctypes.string_at(self.ptr, self.nbytes)

    def zero_(self):
        ctypes.memset(self.ptr, 0, self.nbytes)

    def free(self):
        if self.ptr:
            self.standin.free(self.ptr)
            self.ptr = None


class HostTensor:
    """A contiguous tensor in host memory, seen through __array_interface__ (as a NumPy array)."""

    def __init__(self, shape, typestr="|u1", data=None):
        self.shape, self.typestr = tuple(shape), typestr
        self.nbytes = _nbytes(self.shape, typestr)
        self.buf = ctypes.create_string_buffer(max(self.nbytes, 1))
        if data is not None:
            self.write(data)

    @property
    def __array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (ctypes.addressof(self.buf), False),
                "version": 3, "strides": None}

    def write(self, data):
        assert len(data) == self.nbytes
        ctypes.memmove(self.buf, bytes(data), self.nbytes)

    def read(self):
        return self.buf.raw[:self.nbytes]

    def free(self):
        pass
