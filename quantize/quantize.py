"""F32/F16/BF16 GGUF -> quantized GGUF through llama.cpp's own quantizer, with a fallback report.

`llama_model_quantize` (llama-cpp-python's binding of `src/llama-quant.cpp`) picks a type per tensor:
the requested type, a mix for the `_M` variants (`llama_tensor_get_type_impl`: attn_v / ffn_down of some
layers and the output tensor get Q6_K), F32 for 1-D tensors. When a row length is not a multiple of the
type's block size (256 for k-quants) it silently falls back (`tensor_type_fallback`: Q4_K -> Q5_0,
Q5_K -> Q5_1, Q6_K -> Q8_0, else F16) and still returns success. `quantize_gguf` reads the result back
and lists every tensor outside the types the requested mix allows.

Usage::

    report = quantize_gguf("model-f16.gguf", "model-q4_k_m.gguf", "Q4_K_M")
    for fallback in report.fallbacks: print(fallback)
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from gguf import GGMLQuantizationType as QType

from .errors import QuantizationError
from .gguf_info import GGUFHeader, ggml_type_name, read_gguf_header
from .output import check_output_path, temporary_output

__all__ = ["QUANT_TYPES", "Fallback", "QuantizeReport", "quantize_gguf"]


class _QuantSpec(NamedTuple):
    ftype_name: str  # llama_cpp.LLAMA_FTYPE_<name>
    primary: QType  # the type most 2-D tensors get
    allowed: frozenset[QType]  # every type llama.cpp's mix may choose on purpose


QUANT_TYPES: Mapping[str, _QuantSpec] = MappingProxyType({
    "Q8_0": _QuantSpec("MOSTLY_Q8_0", QType.Q8_0, frozenset({QType.Q8_0})),
    "Q6_K": _QuantSpec("MOSTLY_Q6_K", QType.Q6_K, frozenset({QType.Q6_K})),
    "Q5_K_M": _QuantSpec("MOSTLY_Q5_K_M", QType.Q5_K, frozenset({QType.Q5_K, QType.Q6_K})),
    "Q4_K_M": _QuantSpec("MOSTLY_Q4_K_M", QType.Q4_K, frozenset({QType.Q4_K, QType.Q6_K})),
    "Q4_0": _QuantSpec("MOSTLY_Q4_0", QType.Q4_0, frozenset({QType.Q4_0, QType.Q6_K})),  # Q6_K: output tensor
})


class Fallback(NamedTuple):
    """A tensor that did not get a type of the requested mix (row length not a multiple of the block size)."""

    tensor: str  # GGUF tensor name
    expected: str  # the mix's primary type, e.g. "Q4_K"
    actual: str  # what llama.cpp wrote, e.g. "Q5_0"


@dataclass(frozen=True)
class QuantizeReport:
    """What `quantize_gguf` produced.

    Attributes:
        tensor_types: type name -> number of tensors in the output.
        fallbacks: tensors outside the requested mix; empty when every row length fits the block size.
    """

    in_path: Path
    out_path: Path
    qtype: str
    elapsed_s: float
    in_size_bytes: int
    out_size_bytes: int
    tensor_types: dict[str, int] = field(default_factory=dict)
    fallbacks: tuple[Fallback, ...] = ()


def find_fallbacks(header: GGUFHeader, qtype: str) -> tuple[Fallback, ...]:
    """Tensors of a quantized GGUF whose type is outside `qtype`'s mix (1-D tensors, kept F32, are skipped)."""
    spec = QUANT_TYPES[qtype]
    return tuple(
        Fallback(tensor.name, spec.primary.name, ggml_type_name(tensor.ggml_type))
        for tensor in header.tensors
        if len(tensor.shape) >= 2 and tensor.ggml_type not in spec.allowed
    )


def _run_llama_quantize(in_path: Path, temp_path: Path, qtype: str, n_threads: int) -> None:
    """Call `llama_model_quantize`; raise QuantizationError on a non-zero status."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_{QUANT_TYPES[qtype].ftype_name}")
    params.nthread = n_threads
    status = llama_cpp.llama_model_quantize(str(in_path).encode(), str(temp_path).encode(), params)
    if status != 0:
        raise QuantizationError(in_path, qtype, f"llama_model_quantize returned {status}; see llama.cpp's log above")


def quantize_gguf(in_path: str | Path, out_path: str | Path, qtype: str, *, n_threads: int = 0) -> QuantizeReport:
    """Quantize an F32/F16/BF16 GGUF with llama.cpp and report tensors that fell back to other types.

    Args:
        in_path: the source GGUF (checked for corruption and truncation first).
        out_path: the file to write; its folder must exist. Replaced atomically when complete.
        qtype: one of Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0.
        n_threads: quantizer threads; 0 lets llama.cpp use every core.
    Returns:
        a QuantizeReport with the output's tensor type counts and its fallbacks.
    Raises:
        ValueError: unknown qtype.
        GGUFReadError: `in_path` is missing, corrupt or truncated (no output is created).
        QuantizationError: llama.cpp refused the input; OutputNotWritableError: bad output folder.
    """
    if qtype not in QUANT_TYPES:
        raise ValueError(f"qtype is {qtype!r}; expected one of {', '.join(QUANT_TYPES)}")
    in_path, out_path = Path(in_path), Path(out_path)
    check_output_path(out_path)
    read_gguf_header(in_path)
    started = time.perf_counter()
    with temporary_output(out_path) as temp_path:
        _run_llama_quantize(in_path, temp_path, qtype, n_threads)
        header = read_gguf_header(temp_path)
    return QuantizeReport(
        in_path=in_path,
        out_path=out_path,
        qtype=qtype,
        elapsed_s=time.perf_counter() - started,
        in_size_bytes=in_path.stat().st_size,
        out_size_bytes=out_path.stat().st_size,
        tensor_types=dict(Counter(ggml_type_name(tensor.ggml_type) for tensor in header.tensors)),
        fallbacks=find_fallbacks(header, qtype),
    )
