"""The bf16/fp16 fallback product through cuBLAS, called through ctypes.

CuPy has no bf16 matmul, and its own cuBLAS wrappers refuse to run inside a stream capture;
cuBLAS itself does not, so the fallback calls ``cublasGemmEx`` of the library CuPy has loaded, on
CuPy's handle for the current device and thread, and can be captured into a CUDA graph.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

# cudaDataType and cublasComputeType_t values (library_types.h, cublas_api.h).
_CUDA_TYPE = {"float16": 2, "bfloat16": 14}
_CUBLAS_COMPUTE_32F = 68
_CUBLAS_GEMM_DEFAULT = -1
_OP_N, _OP_T = 0, 1

# alpha = 1 and beta = 0 in host memory (cuBLAS's default pointer mode reads them at the call).
_ALPHA = np.ones(1, np.float32)
_BETA = np.zeros(1, np.float32)

_LIB = None
_LOCK = threading.Lock()


def _cublas():
    global _LIB
    with _LOCK:
        if _LIB is None:
            import cupy

            cupy.cuda.device.get_cublas_handle()  # loads libcublas into the process
            lib = None
            for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
                try:
                    lib = ctypes.CDLL(name)
                    break
                except OSError:
                    continue
            if lib is None:
                raise RuntimeError("libcublas not found (the bf16 fallback runs through cuBLAS)")
            vp, i = ctypes.c_void_p, ctypes.c_int
            lib.cublasSetStream_v2.argtypes = [vp, vp]
            lib.cublasGemmEx.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i]
            _LIB = lib
        return _LIB


def gemm_xwt(x: int, ldx: int, w: int, ldw: int, rows: int, n: int, k: int, out: int, ldc: int,
             stream: int, dtype: str) -> None:
    """out[0:rows, 0:n] = x[0:rows, 0:k] . w[0:n, 0:k]^T, fp32 accumulation, rounded once.

    Parameters
    ----------
    x, w, out : int
        Device pointers: activations [rows, k], weight [n, k] (k contiguous) and output [rows, n],
        all of ``dtype``, at row strides ``ldx``, ``ldw`` and ``ldc`` elements.
    rows, n, k : int
    stream : int
        Raw CUDA stream handle.
    dtype : str
        ``"bfloat16"`` or ``"float16"``.
    """
    import cupy

    lib = _cublas()
    handle = cupy.cuda.device.get_cublas_handle()
    t = _CUDA_TYPE[dtype]
    # cuBLAS is column-major: out^T [n, rows] = (w as a column-major [k, n])^T . (x as [k, rows]).
    status = lib.cublasSetStream_v2(handle, stream)
    status = status or lib.cublasGemmEx(handle, _OP_T, _OP_N, n, rows, k, _ALPHA.ctypes.data, w, t, ldw,
                                        x, t, ldx, _BETA.ctypes.data, out, t, ldc,
                                        _CUBLAS_COMPUTE_32F, _CUBLAS_GEMM_DEFAULT)
    if status:
        raise RuntimeError(f"cuBLAS status {status} in the {dtype} fallback [{rows} x {k}] . [{n} x {k}]^T")
