"""The project's one GGUF header reader, standard library only: the facts a memory plan needs (``ModelHeader``),
and the header as stored (``GGUFHeader``) for ``venus_edge.quantize``'s checks and ``inspect``.

The runtime may not import ``gguf`` (the quantize extra) or load the weights to learn a model's shape, so this
module walks the header itself: magic, version, tensor count, metadata key/values, tensor infos, and the data
offset (``general.alignment``). The layout is GGUF v2/v3 as written by ``gguf.GGUFWriter``
(gguf-py/gguf/gguf_writer.py) and read by llama.cpp's ``gguf_init_from_file`` (ggml/src/gguf.cpp). Tensor data is
never read; its size is computed from the tensor infos and checked against the file size. ``gguf.GGUFReader``
reads the same header in about 7 s for the 151,936-token Qwen vocabulary on a 2-core machine (it builds a numpy
view per string); this reader takes well under a second, and a test checks the two agree.

Usage::

    header = read_model_header("DR-Venus-4B-RL-Q4_K_M.gguf")
    header.n_layer, header.n_head_kv, header.head_dim_k, header.weight_bytes   # 36, 8, 128, 2_497_281_024
    stored = read_gguf_header("model.gguf", decode_strings=True)   # metadata, tensor infos, data offset

Departures from llama.cpp's reader:
1. Arrays of strings (the vocabulary, the merges) are walked, not decoded: their value is a ``StringArray``
   that holds only the length (``read_gguf_header(..., decode_strings=True)`` decodes them). Reading 150k token
   strings would take longer than everything else together.
2. A per-layer KV-head array (``head_count_kv`` as an array, as some architectures write it) is reduced to its
   largest value, so a plan over-counts the KV cache of such models rather than under-counting it.
3. Values are checked against bounds before anything trusts them, so a file that lies fails here with the path,
   the key and the value, not inside llama.cpp (whose ``GGML_ASSERT`` on ``block_count`` aborts the process):
   counts and lengths against the bytes left in the file, nested arrays and duplicate names refused, tensor
   shapes against int64, and the model's dimensions (``MODEL_BOUNDS``) against llama.cpp's limits and against
   the tensors the file holds (``block_count`` 1e9 in a file with 30 blocks of tensors).
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venus_edge.errors import ModelLoadError, ModelNotFoundError

__all__ = ["MODEL_BOUNDS", "GGUFHeader", "ModelHeader", "StringArray", "TensorInfo", "check_gguf_file",
           "read_gguf_header", "read_model_header"]

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4  # ggml/include/ggml.h; gguf_init_from_file refuses a tensor with more
_INT64_MAX = (1 << 63) - 1
# Fewest bytes a header entry can take, to bound a count by the bytes left: a key/value is a key length (8), one
# key byte, a type (4) and a one-byte value; a tensor info is a name length (8), one name byte, n_dims (4), a type
# (4) and an offset (8); an array item is one byte (a string item: its 8-byte length).
_MIN_KV_BYTES, _MIN_TENSOR_INFO_BYTES = 14, 25

# Bounds of a model's dimensions ({arch}.KEY -> (lowest, highest)), checked before a plan or llama.cpp sees them.
# block_count and expert_count are llama.cpp's own limits (LLAMA_MAX_LAYERS, LLAMA_MAX_EXPERTS in
# src/llama-hparams.h; beyond them llama_model::load_hparams aborts the process); the others are far above any
# released model (Llama 3.1 405B: embedding 16,384, FFN 53,248, 128 heads; Llama 4 Scout: 10M context).
MODEL_BOUNDS: Mapping[str, tuple[int, int]] = {
    "block_count": (1, 512),
    "embedding_length": (1, 1 << 17),
    "feed_forward_length": (0, 1 << 20),
    "attention.head_count": (1, 1 << 12),
    "attention.head_count_kv": (0, 1 << 12),
    "attention.key_length": (1, 1 << 14),
    "attention.value_length": (1, 1 << 14),
    "context_length": (1, 1 << 24),
    "vocab_size": (1, 1 << 24),
    "expert_count": (0, 1024),
    "expert_used_count": (0, 1024),
}

# gguf_type (ggml/include/gguf.h): value type id -> struct format. 8 is STRING, 9 is ARRAY.
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
                   12: "<d"}
_STRING, _ARRAY = 8, 9

# ggml_type id -> (elements per block, bytes per block): GGML_QUANT_SIZES in gguf-py/gguf/constants.py.
GGML_BLOCK_SIZES: Mapping[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18), 42: (64, 18),
}

# LLAMA_FTYPE (include/llama.h, enum llama_ftype) -> the usual name of the file's quant type.
FILE_TYPES: Mapping[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE",
}


@dataclass(frozen=True)
class StringArray:
    """A metadata array of strings that was walked but not decoded (the vocabulary, the merges)."""

    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True)
class ModelHeader:
    """A model's shape and size, as a memory plan needs them.

    Built by ``read_model_header`` from a file, or directly from known dimensions (the README's DR-Venus-4B
    presets). Counts are plain numbers; sizes are bytes.

    Attributes:
        architecture: ``general.architecture`` (``qwen3``, ``llama``, ``qwen2``).
        n_layer: transformer blocks (``{arch}.block_count``).
        n_head: query heads (``{arch}.attention.head_count``).
        n_head_kv: key/value heads (``{arch}.attention.head_count_kv``; ``n_head`` when absent).
        n_embd: hidden size (``{arch}.embedding_length``).
        head_dim_k: elements per key head (``{arch}.attention.key_length``, else ``n_embd / n_head``).
        head_dim_v: elements per value head (``{arch}.attention.value_length``, else ``n_embd / n_head``).
        n_ff: feed-forward width (``{arch}.feed_forward_length``; the largest, if per layer; 0 when absent).
        n_vocab: vocabulary entries (``{arch}.vocab_size``, else the length of ``tokenizer.ggml.tokens``).
        n_ctx_train: training context length in tokens (``{arch}.context_length``), or None when absent.
        file_type: the quant type's name (``general.file_type``, e.g. ``Q4_K_M``), or None when absent.
        weight_bytes: bytes of tensor data (the sum over tensor infos).
        n_params: parameters (elements over all tensors); 0 for a header built from dimensions without it.
        path: the file read, or None for a header built from dimensions.
        tensors: the tensor infos (empty for a header built from dimensions).
        metadata: every key/value of the header (string arrays as ``StringArray``; numeric arrays as tuples).
    """

    architecture: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_embd: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    n_ctx_train: int | None
    weight_bytes: int
    n_ff: int = 0
    file_type: str | None = None
    n_params: int = 0
    path: Path | None = None
    tensors: tuple[TensorInfo, ...] = field(default=(), repr=False, compare=False)
    metadata: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_embd_k_gqa(self) -> int:
        """Key elements per token per layer (``n_embd_k_gqa`` in llama.cpp's llama-hparams.cpp)."""
        return self.head_dim_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        """Value elements per token per layer (``n_embd_v_gqa`` in llama-hparams.cpp)."""
        return self.head_dim_v * self.n_head_kv

    def to_dict(self) -> dict[str, Any]:
        """The dimensions as a JSON-ready dict (``metadata`` left out)."""
        return {
            "path": None if self.path is None else str(self.path), "architecture": self.architecture,
            "file_type": self.file_type, "n_params": self.n_params, "weight_bytes": self.weight_bytes,
            "n_layer": self.n_layer, "n_head": self.n_head, "n_head_kv": self.n_head_kv, "n_embd": self.n_embd,
            "head_dim_k": self.head_dim_k, "head_dim_v": self.head_dim_v, "n_ff": self.n_ff,
            "n_vocab": self.n_vocab, "n_ctx_train": self.n_ctx_train,
        }


class _Cursor:
    """Little-endian reads from a buffer; running past its end is a truncated header."""

    def __init__(self, buffer: memoryview, path: Path, decode_strings: bool) -> None:
        self.buffer, self.position, self.path, self.decode_strings = buffer, 0, path, decode_strings

    def take(self, n_bytes: int) -> memoryview:
        end = self.position + n_bytes
        if end > len(self.buffer):
            raise ModelLoadError(self.path, f"truncated GGUF header: it needs byte {end:,}, the file has "
                                            f"{len(self.buffer):,}")
        view = self.buffer[self.position:end]
        self.position = end
        return view

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.take(self.scalar("<Q"))
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise ModelLoadError(self.path, f"corrupt GGUF header: a string before byte {self.position:,} is not "
                                            f"UTF-8 ({exc.reason})") from exc

    def value(self, value_type: int) -> Any:
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            return self.array()
        if value_type not in _SCALAR_FORMATS:
            raise ModelLoadError(self.path, f"corrupt GGUF header: unknown value type {value_type} before byte "
                                            f"{self.position:,}")
        return self.scalar(_SCALAR_FORMATS[value_type])

    @property
    def remaining(self) -> int:
        return len(self.buffer) - self.position

    def check_count(self, count: int, min_item_bytes: int, what: str) -> None:
        """A count read from the file fits in the bytes left (before anything loops over it or allocates)."""
        if count * min_item_bytes > self.remaining:
            raise ModelLoadError(self.path, f"truncated GGUF header, or a count that lies: {what} is {count:,} "
                                            f"before byte {self.position:,}, more than the {self.remaining:,} bytes "
                                            f"left hold")

    def array(self) -> tuple[Any, ...] | StringArray:
        item_type, count = self.scalar("<I"), self.scalar("<Q")
        if item_type == _ARRAY:
            raise ModelLoadError(self.path, f"corrupt GGUF header: an array of arrays before byte {self.position:,} "
                                            f"(GGUF has no nested arrays)")
        item_bytes = struct.calcsize(_SCALAR_FORMATS[item_type]) if item_type in _SCALAR_FORMATS else 8
        self.check_count(count, item_bytes, "an array's length")
        if item_type in _SCALAR_FORMATS:
            item_format = _SCALAR_FORMATS[item_type]
            raw = self.take(count * struct.calcsize(item_format))
            return tuple(item for (item,) in struct.iter_unpack(item_format, raw))
        if item_type == _STRING and not self.decode_strings:
            for _ in range(count):
                self.take(self.scalar("<Q"))
            return StringArray(count)
        return tuple(self.value(item_type) for _ in range(count))


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry.

    Attributes:
        name: the GGUF tensor name (``blk.0.ffn_down.weight``).
        shape: extents in ggml order (row length first).
        ggml_type: the ggml type id (``ggml_type`` in ggml/include/ggml.h: 12 is Q4_K).
        offset: bytes from the start of the tensor data.
        n_bytes: bytes of data, or -1 for a type missing from ``GGML_BLOCK_SIZES``.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    n_bytes: int

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


def _tensor_bytes(shape: tuple[int, ...], ggml_type: int) -> int:
    if ggml_type not in GGML_BLOCK_SIZES:
        return -1
    block, type_bytes = GGML_BLOCK_SIZES[ggml_type]
    return math.prod(shape) // block * type_bytes


def _check_magic(magic: bytes, path: Path) -> None:
    """The one GGUF magic check (``gguf_init_from_file`` in ggml/src/gguf.cpp reads the same four bytes)."""
    if magic != GGUF_MAGIC:
        raise ModelLoadError(path, f"not a GGUF file: magic is {magic!r}, expected {GGUF_MAGIC!r}")


def check_gguf_file(path: Path) -> None:
    """Fail early, with the path, on a file that is missing, empty or not GGUF (its first four bytes only).

    Raises:
        ModelNotFoundError: no such file, or a folder (the message names the GGUF files in it).
        ModelLoadError: not a GGUF file (wrong magic) or empty.
    """
    if not path.is_file():
        raise ModelNotFoundError.for_path(path)
    with path.open("rb") as handle:
        _check_magic(handle.read(4), path)


@dataclass(frozen=True)
class GGUFHeader:
    """A GGUF file's header as stored (``read_gguf_header``).

    Attributes:
        path: the file read.
        version: the GGUF version (2 or 3).
        metadata: every key/value of the header: numeric arrays as tuples, string arrays as tuples of strings
            when decoded, else as ``StringArray``.
        tensors: the tensor infos, in file order.
        data_offset: bytes from the start of the file to the first tensor's data (``general.alignment``).
        file_size_bytes: the size of the file.
    """

    path: Path
    version: int
    metadata: Mapping[str, Any] = field(repr=False)
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    data_offset: int
    file_size_bytes: int


def _parse(buffer: memoryview, path: Path, decode_strings: bool) -> GGUFHeader:
    """The header of a GGUF buffer (gguf-py/gguf/gguf_reader.py's layout), its counts and shapes bounded
    (departure 3)."""
    cursor = _Cursor(buffer, path, decode_strings)
    _check_magic(bytes(cursor.take(4)), path)
    version = cursor.scalar("<I")
    if version not in (2, 3):
        raise ModelLoadError(path, f"GGUF version {version} is not supported (expected 2 or 3)")
    n_tensors, n_kv = cursor.scalar("<Q"), cursor.scalar("<Q")
    cursor.check_count(n_kv, _MIN_KV_BYTES, "the metadata key count")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cursor.string()
        if key in metadata:
            raise ModelLoadError(path, f"corrupt GGUF header: metadata key {key!r} appears twice")
        metadata[key] = cursor.value(cursor.scalar("<I"))
    cursor.check_count(n_tensors, _MIN_TENSOR_INFO_BYTES, "the tensor count")
    alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise ModelLoadError(path, f"corrupt GGUF header: general.alignment is {alignment!r} (a power of 2 expected)")
    tensors: dict[str, TensorInfo] = {}
    for _ in range(n_tensors):
        tensor = _tensor_info(cursor, path, alignment)
        if tensor.name in tensors:
            raise ModelLoadError(path, f"corrupt GGUF header: tensor {tensor.name!r} appears twice")
        tensors[tensor.name] = tensor
    data_offset = -(-cursor.position // alignment) * alignment
    return GGUFHeader(path, version, metadata, tuple(tensors.values()), data_offset, len(buffer))


def _tensor_info(cursor: _Cursor, path: Path, alignment: int) -> TensorInfo:
    """One tensor info, refused when its shape overflows int64 or its offset is not aligned (``gguf.cpp``'s rules)."""
    name = cursor.string()
    n_dims = cursor.scalar("<I")
    if n_dims > GGML_MAX_DIMS:
        raise ModelLoadError(path, f"corrupt GGUF header: tensor {name!r} has {n_dims} dimensions (at most "
                                   f"{GGML_MAX_DIMS})")
    shape = tuple(cursor.scalar("<Q") for _ in range(n_dims))
    if math.prod(shape) > _INT64_MAX:
        raise ModelLoadError(path, f"corrupt GGUF header: tensor {name!r} has shape {shape}, more than 2**63 - 1 "
                                   f"elements")
    ggml_type, offset = cursor.scalar("<I"), cursor.scalar("<Q")
    if offset % alignment:
        raise ModelLoadError(path, f"corrupt GGUF header: tensor {name!r} starts at data offset {offset:,}, not a "
                                   f"multiple of the alignment {alignment}")
    return TensorInfo(name, shape, ggml_type, offset, _tensor_bytes(shape, ggml_type))


def _sizes_known(header: GGUFHeader) -> bool:
    """False when a tensor has a type missing from ``GGML_BLOCK_SIZES`` (a type newer than this table)."""
    return all(t.n_bytes >= 0 for t in header.tensors)


def _check_data_present(header: GGUFHeader) -> None:
    """The file holds all the tensor data its header promises (the start of each tensor when its size is unknown)."""
    if header.tensors:
        last = max(header.tensors, key=lambda t: t.offset + max(t.n_bytes, 0))
        end = header.data_offset + last.offset + max(last.n_bytes, 0)
        if end > header.file_size_bytes:
            raise ModelLoadError(header.path, f"truncated GGUF file: tensor {last.name} ends at byte {end:,}, the "
                                              f"file has {header.file_size_bytes:,}")


def _weight_bytes(header: GGUFHeader) -> int:
    """Bytes of tensor data, from the tensor infos; with a tensor of unknown size, the data offset to the file end."""
    if not _sizes_known(header):
        return max(0, header.file_size_bytes - header.data_offset)
    return sum(t.n_bytes for t in header.tensors)


def _largest(value: Any) -> Any:
    """A per-layer array reduced to its largest entry (departure 2); a scalar as it is."""
    return max(value) if isinstance(value, tuple) and value else value


def _header_from_metadata(metadata: Mapping[str, Any], tensors: list[TensorInfo], weight_bytes: int,
                          path: Path) -> ModelHeader:
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelLoadError(path, "the GGUF header has no general.architecture")
    _check_model_bounds(metadata, arch, path)

    def number(key: str, default: int | None = None) -> int:
        value = _largest(metadata.get(f"{arch}.{key}", default))
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ModelLoadError(path, f"the GGUF header has no usable {arch}.{key} (found {value!r})")
        return value

    n_embd, n_head = number("embedding_length"), number("attention.head_count")
    tokens = metadata.get("tokenizer.ggml.tokens")
    n_vocab = number("vocab_size", tokens.length if isinstance(tokens, StringArray) else None)
    n_ctx_train = metadata.get(f"{arch}.context_length")
    file_type = metadata.get("general.file_type")
    header = ModelHeader(
        architecture=arch,
        n_layer=number("block_count"),
        n_head=n_head,
        n_head_kv=number("attention.head_count_kv", n_head),
        n_embd=n_embd,
        head_dim_k=number("attention.key_length", n_embd // n_head),
        head_dim_v=number("attention.value_length", n_embd // n_head),
        n_ff=number("feed_forward_length", 0),
        n_vocab=n_vocab,
        n_ctx_train=int(n_ctx_train) if isinstance(n_ctx_train, int) and n_ctx_train > 0 else None,
        file_type=FILE_TYPES.get(file_type, str(file_type)) if isinstance(file_type, int) else None,
        weight_bytes=weight_bytes,
        n_params=sum(t.n_elements for t in tensors),
        path=path,
        tensors=tuple(tensors),
        metadata=metadata,
    )
    _check_against_tensors(header, {t.name: t for t in tensors})
    return header


def _check_model_bounds(metadata: Mapping[str, Any], arch: str, path: Path) -> None:
    """Each dimension in ``MODEL_BOUNDS`` (a scalar or a per-layer array) lies in its bounds (departure 3)."""
    n_layer = metadata.get(f"{arch}.block_count")
    for key, (lowest, highest) in MODEL_BOUNDS.items():
        value = metadata.get(f"{arch}.{key}")
        if value is None:
            continue
        values = value if isinstance(value, tuple) else (value,)
        for item in values:
            if not isinstance(item, int) or isinstance(item, bool) or not lowest <= item <= highest:
                shown = f"{item:,}" if isinstance(item, int) and not isinstance(item, bool) else repr(item)
                raise ModelLoadError(path, f"{arch}.{key} is {shown} in the GGUF header; it must be an integer in "
                                           f"[{lowest:,}, {highest:,}]")
        if isinstance(value, tuple) and len(value) != n_layer:
            raise ModelLoadError(path, f"{arch}.{key} has {len(value):,} per-layer values in the GGUF header, "
                                       f"{arch}.block_count is {n_layer!r}")
    n_nextn = metadata.get(f"{arch}.nextn_predict_layers", 0)
    # another GGML_ASSERT in llama_model::load_hparams
    if isinstance(n_layer, int) and (not isinstance(n_nextn, int) or not 0 <= n_nextn <= n_layer):
        raise ModelLoadError(path, f"{arch}.nextn_predict_layers is {n_nextn!r} in the GGUF header; it must be an "
                                   f"integer in [0, {arch}.block_count = {n_layer}]")
    n_expert = metadata.get(f"{arch}.expert_count", 0)
    if _largest(metadata.get(f"{arch}.expert_used_count", 0)) > n_expert:
        raise ModelLoadError(path, f"{arch}.expert_used_count is more than {arch}.expert_count ({n_expert}) in the "
                                   f"GGUF header")


def _check_against_tensors(header: ModelHeader, tensors: Mapping[str, TensorInfo]) -> None:
    """The dimensions agree with the tensors the file holds (llama.cpp's tensor names, src/llama-arch.cpp)."""
    arch, path = header.architecture, header.path
    assert path is not None
    blocks = {int(name.split(".")[1]) for name in tensors if name.startswith("blk.") and name.split(".")[1].isdigit()}
    if blocks and blocks != set(range(header.n_layer)):
        raise ModelLoadError(path, f"{arch}.block_count is {header.n_layer:,} in the GGUF header, the file holds "
                                   f"tensors of {len(blocks):,} blocks ({min(blocks)}..{max(blocks)})")
    uniform_heads = not isinstance(header.metadata.get(f"{arch}.attention.head_count_kv"), tuple)
    expected = {  # tensor -> (dimension, value, key it comes from); ggml order: a weight's row length first
        "token_embd.weight": ((0, header.n_embd, "embedding_length"), (1, header.n_vocab, "vocab_size")),
        "blk.0.attn_q.weight": ((0, header.n_embd, "embedding_length"),),
        "blk.0.ffn_up.weight": ((1, header.n_ff, "feed_forward_length"),),
        "blk.0.attn_k.weight": ((1, header.n_head_kv * header.head_dim_k, "attention.head_count_kv * key_length"),)
        if uniform_heads else (),
    }
    for name, checks in expected.items():
        shape = tensors[name].shape if name in tensors else ()
        for dimension, value, key in checks:
            if len(shape) > dimension and shape[dimension] != value:
                raise ModelLoadError(path, f"{arch}.{key} is {value:,} in the GGUF header, tensor {name} has shape "
                                           f"{shape}")


def read_gguf_header(path: str | Path, *, decode_strings: bool = False) -> GGUFHeader:
    """Read a GGUF file's header (not its tensor data) and check that the tensor data it promises is there.

    Args:
        path: a local GGUF file.
        decode_strings: decode arrays of strings (the vocabulary, the merges) into tuples of strings instead of
            walking them (departure 1).

    Raises:
        ModelNotFoundError: no such file, or a folder (the message names the GGUF files in it).
        ModelLoadError: empty, not GGUF, an unsupported version, a corrupt or truncated header, or tensor data
            shorter than the header promises. The message names the path.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError.for_path(path)
    try:
        with path.open("rb") as handle:
            if path.stat().st_size == 0:
                raise ModelLoadError(path, "the file is empty (0 bytes)")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    header = _parse(view, path, decode_strings)
                finally:
                    view.release()
    except OSError as exc:
        raise ModelLoadError(path, f"{type(exc).__name__}: {exc}") from exc
    except (struct.error, OverflowError, MemoryError, ValueError) as exc:
        raise ModelLoadError(path, f"corrupt GGUF header ({type(exc).__name__}: {exc})") from exc
    _check_data_present(header)
    return header


def read_model_header(path: str | Path) -> ModelHeader:
    """Read a GGUF file's header (not its tensor data) into a ``ModelHeader``.

    Args:
        path: a local GGUF file.

    Raises:
        ModelNotFoundError: no such file, or a folder (the message names the GGUF files in it).
        ModelLoadError: empty, not GGUF, an unsupported version, a corrupt or truncated header, tensor data
            shorter than the header promises, or a header without the dimensions a plan needs. The message
            names the path.
    """
    header = read_gguf_header(path)
    return _header_from_metadata(header.metadata, list(header.tensors), _weight_bytes(header), header.path)
