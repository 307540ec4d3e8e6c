"""Every error the quantize pipeline raises, in one tree under the package's root ``VenusEdgeError``.

```
QuantizeError
├── ConversionError                 HF checkpoint -> GGUF
│   ├── UnsupportedArchitectureError
│   ├── MissingTensorError
│   ├── TensorShapeError
│   ├── TokenizerFilesMissingError
│   ├── CheckpointNotFoundError
│   ├── OutputNotWritableError
│   └── DiskFullError
├── GGUFReadError                   a GGUF file that is missing, truncated or corrupt
├── QuantizedSourceError            a quantized GGUF given where the full-precision master belongs
├── QuantizationError               llama.cpp's quantizer failed or the type is unknown
└── ArmToolMissingError             the ARM check's aarch64 build, qemu or sysroot is missing (a FileNotFoundError)
```

Each message says what failed, the value seen, the value expected, and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from venus_edge.errors import VenusEdgeError

__all__ = [
    "ArmToolMissingError",
    "CheckpointNotFoundError",
    "ConversionError",
    "DiskFullError",
    "GGUFReadError",
    "MissingTensorError",
    "OutputNotWritableError",
    "QuantizationError",
    "QuantizeError",
    "QuantizedSourceError",
    "TensorShapeError",
    "TokenizerFilesMissingError",
    "UnsupportedArchitectureError",
]


class QuantizeError(VenusEdgeError):
    """Base of every error raised by `venus_edge.quantize`."""


class ConversionError(QuantizeError):
    """A checkpoint could not be converted to GGUF; no output file was left behind."""


class UnsupportedArchitectureError(ConversionError):
    """config.json names an architecture that the converter has no mapping for."""

    def __init__(self, seen: Sequence[str] | None, supported: Sequence[str], config_path: Path) -> None:
        self.seen, self.supported, self.config_path = seen, tuple(supported), config_path
        super().__init__(
            f"{config_path}: architectures is {seen!r}; supported are {', '.join(self.supported)}. "
            "Convert a checkpoint of a supported architecture, or add a mapping to quantize/convert.py's registry."
        )


class MissingTensorError(ConversionError):
    """The checkpoint lacks tensors the architecture needs, or holds tensors it cannot map."""

    def __init__(self, missing: Mapping[str, str], extra: Mapping[str, str], checkpoint: Path) -> None:
        """`missing` and `extra` map HF tensor names to the shard they should come from / were found in."""
        self.missing, self.extra, self.checkpoint = dict(missing), dict(extra), checkpoint
        parts = []
        if missing:
            parts.append(
                "missing " + ", ".join(f"{name} (expected in {shard})" for name, shard in sorted(missing.items()))
            )
        if extra:
            parts.append("unexpected " + ", ".join(f"{name} (in {shard})" for name, shard in sorted(extra.items())))
        super().__init__(
            f"{checkpoint}: tensors do not match the architecture: {'; '.join(parts)}. "
            "Re-download or re-save the checkpoint with all its shards."
        )


class TensorShapeError(ConversionError):
    """A tensor's shape disagrees with the shape config.json implies."""

    def __init__(self, name: str, shard: str, actual: Sequence[int], expected: Sequence[int]) -> None:
        self.name, self.shard, self.actual, self.expected = name, shard, tuple(actual), tuple(expected)
        super().__init__(
            f"{name} in {shard} has shape {self.actual}; config.json implies {self.expected}. "
            "Check that config.json belongs to these weights."
        )


class TokenizerFilesMissingError(ConversionError):
    """The checkpoint folder lacks the files the tokenizer is read from."""

    def __init__(self, missing: Sequence[str], checkpoint: Path) -> None:
        self.missing, self.checkpoint = tuple(missing), checkpoint
        super().__init__(
            f"{checkpoint}: missing tokenizer file(s) {', '.join(self.missing)}; expected tokenizer.json and "
            "tokenizer_config.json next to config.json. Copy them from the base model's repository."
        )


class CheckpointNotFoundError(ConversionError):
    """The source is neither a checkpoint folder nor a hub repository available offline."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        super().__init__(
            f"checkpoint {source!r} not found: {reason}. Pass a folder holding config.json and *.safetensors, "
            "or a hub repository id that is in the Hugging Face cache."
        )


class OutputNotWritableError(ConversionError):
    """The output folder does not exist or cannot be written to."""

    def __init__(self, out_path: Path, reason: str) -> None:
        self.out_path = out_path
        super().__init__(f"cannot write {out_path}: {reason}. Choose a folder you can write.")


class DiskFullError(ConversionError):
    """The disk filled up (ENOSPC) or the file-size limit (RLIMIT_FSIZE) was hit while writing."""

    def __init__(self, out_path: Path, needed_bytes: int | None, reason: str) -> None:
        self.out_path, self.needed_bytes = out_path, needed_bytes
        need = f"; the output needs about {needed_bytes:,} bytes" if needed_bytes else ""
        super().__init__(
            f"ran out of space writing {out_path}: {reason}{need}. "
            "The partial file was removed; free space or write to another disk."
        )


#: What to do about a GGUF that is there but cannot be read.
REMAKE_ADVICE = "Re-create the file (convert or quantize again)."


class GGUFReadError(QuantizeError):
    """A GGUF file is missing, truncated or corrupt (or a folder was given: the reason names the files in it)."""

    def __init__(self, path: Path, reason: str, *, advice: str = REMAKE_ADVICE) -> None:
        self.path = path
        super().__init__(f"cannot read GGUF {path}: {reason}. {advice}".rstrip())


class QuantizationError(QuantizeError):
    """llama.cpp's quantizer rejected the input or the requested type."""

    def __init__(self, in_path: Path, qtype: str, reason: str) -> None:
        self.in_path, self.qtype = in_path, qtype
        super().__init__(f"quantizing {in_path} to {qtype} failed: {reason}")


class QuantizedSourceError(QuantizeError):
    """A GGUF source that is already quantized: quantizing it again would lose quality twice (nothing is written)."""

    def __init__(self, source: Path, file_type: str, master: Path | None) -> None:
        self.source, self.file_type, self.master = source, file_type, master
        instead = (f"quantize from the master beside it instead: {master}" if master is not None else
                   "no F16/BF16/F32 GGUF lies beside it; convert from the checkpoint instead: "
                   "venus-edge quantize CHECKPOINT_FOLDER_OR_REPO --out DIR")
        super().__init__(f"{source} is already quantized ({file_type}); quantizing it again would lose quality "
                         f"twice, so nothing was written; {instead}")


class ArmToolMissingError(QuantizeError, FileNotFoundError):
    """The ARM check cannot run here: the cross-built ``llama-greedy``, ``qemu-aarch64`` or the arm64 sysroot is
    missing (`venus_edge.quantize.arm_check`); the message names what and how to install it."""

    def __init__(self, missing: str, fix: str) -> None:
        self.missing = missing
        super().__init__(f"{missing} is missing; {fix}")
