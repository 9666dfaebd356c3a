"""Projection families and the activation-quantization format pinned for each.

A deployment fixes, per projection family, how activations are quantized: ``none`` (the engine's
own path), ``nvfp4`` (the NVFP4 W4A4 mx projection) or ``w8a8`` (the int8/fp8 W8A8 projection).
The configuration is parsed from a command-line style value::

    --activation-quantization gdn=nvfp4,ffn=w8a8

or from the environment variable ``GDN_KERNELS_ACTIVATION_QUANTIZATION`` (same syntax).
Families not named are ``none``.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from types import MappingProxyType

ENV_VAR = "GDN_KERNELS_ACTIVATION_QUANTIZATION"


class ProjFamily(str, enum.Enum):
    """Kinds of projection a model has."""

    GDN = "gdn"  # GDN mixer: in_proj_qkvz and out_proj
    FFN = "ffn"  # dense FFN: gate/up and down
    ATTN = "attn"  # full-attention layers' projections


class ActQuant(str, enum.Enum):
    """Activation-quantization format pinned for a family."""

    NONE = "none"
    NVFP4 = "nvfp4"
    W8A8 = "w8a8"


@dataclass(frozen=True)
class ActQuantConfig:
    """Format pinned per family (missing families are ``none``)."""

    formats: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        object.__setattr__(self, "formats", MappingProxyType(
            {ProjFamily(k): ActQuant(v) for k, v in dict(self.formats).items()}))

    def format_for(self, family) -> ActQuant:
        return self.formats.get(ProjFamily(family), ActQuant.NONE)

    def pins(self, family, fmt) -> bool:
        """True when ``family`` is pinned to ``fmt``."""
        return self.format_for(family) is ActQuant(fmt)

    @classmethod
    def parse(cls, value: str) -> "ActQuantConfig":
        """Parse ``family=format[,family=format...]`` (whitespace and an empty value allowed).

        Raises ValueError naming the bad item, the known families or formats.
        """
        formats = {}
        for item in (value or "").split(","):
            item = item.strip()
            if not item:
                continue
            if "=" not in item:
                raise ValueError(f"activation quantization item {item!r} is not family=format")
            fam, fmt = (s.strip().lower() for s in item.split("=", 1))
            try:
                family = ProjFamily(fam)
            except ValueError:
                known = ", ".join(f.value for f in ProjFamily)
                raise ValueError(f"unknown projection family {fam!r} (known: {known})") from None
            try:
                quant = ActQuant(fmt)
            except ValueError:
                known = ", ".join(f.value for f in ActQuant)
                raise ValueError(f"unknown activation quantization {fmt!r} for {fam} (known: {known})") from None
            if family in formats and formats[family] is not quant:
                raise ValueError(f"family {fam} given twice ({formats[family].value} and {quant.value})")
            formats[family] = quant
        return cls(formats)

    @classmethod
    def from_env(cls, environ=None) -> "ActQuantConfig":
        env = os.environ if environ is None else environ
        return cls.parse(env.get(ENV_VAR, ""))

    def __str__(self) -> str:
        return ",".join(f"{f.value}={q.value}" for f, q in self.formats.items())


def add_argument(parser) -> None:
    """Add ``--activation-quantization`` to an argparse parser (type: ActQuantConfig)."""
    parser.add_argument("--activation-quantization", type=ActQuantConfig.parse, default=None,
                        help="family=format pairs, e.g. gdn=nvfp4,ffn=w8a8 (families: gdn, ffn, attn; "
                             f"formats: none, nvfp4, w8a8; default from ${ENV_VAR})")
