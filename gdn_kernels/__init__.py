"""gdn_kernels: quantized decode-time projections of Gated DeltaNet layers, for any engine.

Callers hand in raw device pointers (or arrays of any framework), strides and a stream; a
projection returns True when it launched and wrote its output, False when the case is outside
its family (nothing launched, the caller falls back).
"""

from gdn_kernels.config import ActQuant, ActQuantConfig, ProjFamily
from gdn_kernels.ffn import W8a8Ffn
from gdn_kernels.layer import DenseFfn, DenseWeight, GdnLayer, MoeFfn, ProjPath, QkvzLayout
from gdn_kernels.nvfp4 import GpuCtx, Nvfp4Ctx, Nvfp4Weight, fixed_nvfp4_proj
from gdn_kernels.w8a8 import Support, W8a8Ctx, W8a8Mixer, stream_handle, supports
from gdn_kernels.weights import (
    Fp8BlockScaled,
    Fp8PerChannel,
    Fp8ScaleFormat,
    Fp8Weight,
    W8a8Weight,
    WeightFormat,
)

__version__ = "0.1.0"

__all__ = [
    "DenseFfn",
    "DenseWeight",
    "GdnLayer",
    "MoeFfn",
    "ProjPath",
    "QkvzLayout",
    "W8a8Ffn",
    "ActQuant",
    "ActQuantConfig",
    "GpuCtx",
    "Nvfp4Ctx",
    "Nvfp4Weight",
    "ProjFamily",
    "fixed_nvfp4_proj",
    "Fp8BlockScaled",
    "Fp8PerChannel",
    "Fp8ScaleFormat",
    "Fp8Weight",
    "Support",
    "W8a8Ctx",
    "W8a8Mixer",
    "W8a8Weight",
    "WeightFormat",
    "stream_handle",
    "supports",
]
