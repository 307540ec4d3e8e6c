"""Hugging Face safetensors checkpoint -> GGUF (F32, F16 or BF16), following llama.cpp's converter.

What is written, and the llama.cpp code it follows (vendor/llama.cpp in llama-cpp-python 0.3.36):
- hyper-parameters: `TextModel.set_gguf_parameters` in `conversion/base.py`;
- vocabulary: `get_vocab_base` / `_set_vocab_gpt2` in `conversion/base.py` (token list padded with
  `[PAD{i}]` to `vocab_size`, token types NORMAL / CONTROL / USER_DEFINED / UNUSED), then
  `gguf.SpecialVocab` for merges, special-token ids, add-bos and the chat template;
- tensors: `ModelBase.prepare_tensors` (1-D tensors such as norms stay F32; the rest take the output type),
  names through `gguf.TensorNameMap`; shards in sorted order, tensors by name within a shard (`index_tensors`);
- general metadata: `ModelBase.prepare_metadata` through `gguf.Metadata`.

Unlike llama.cpp's script it streams: tensor infos come from the safetensors headers, then each tensor is
read with plain positional reads (no mmap, whose touched pages would count as resident) a block of rows at a
time, widened, encoded and written before the next block is read. Peak memory is the imports and vocabulary
plus a few buffers of `STREAM_CHUNK_BYTES`, whatever the model size; the bytes written are those of encoding
each tensor whole (F32 / F16 / BF16 encoding is elementwise).
The file is written under a temporary name in the target folder and renamed when complete; on any
failure the temporary file is removed.

Usage::

    convert_checkpoint("ckpt/", "model-f16.gguf", out_type="f16")
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeGuard

import gguf
import numpy as np

from venus_edge.memory.header import MODEL_BOUNDS

from .errors import (
    CheckpointNotFoundError,
    ConversionError,
    DiskFullError,
    MissingTensorError,
    OutputNotWritableError,
    TensorShapeError,
    TokenizerFilesMissingError,
    UnsupportedArchitectureError,
)
from .output import check_output_path, temporary_output
from .qwen_tokenizer import QWEN2_SPLIT_PATTERN

__all__ = [
    "ARCHITECTURES", "OUT_TYPES", "STREAM_CHUNK_BYTES", "ArchitectureSpec", "convert_checkpoint", "resolve_checkpoint",
]


@dataclass(frozen=True)
class ArchitectureSpec:
    """How one HF `architectures` entry maps to GGUF.

    Attributes:
        gguf_arch: the llama.cpp architecture (`general.architecture`).
        qk_norm: per-head RMSNorm on queries and keys (Qwen3's q_norm / k_norm).
        qkv_bias: biases on the q/k/v projections (Qwen2).
    """

    gguf_arch: gguf.MODEL_ARCH
    qk_norm: bool
    qkv_bias: bool


# LlamaForCausalLM is left out on purpose: llama.cpp permutes its q/k rows for its rope layout
# (`LlamaModel.permute` in conversion/llama.py), so its mapping is not the plain rename below.
ARCHITECTURES: Mapping[str, ArchitectureSpec] = MappingProxyType({
    "Qwen3ForCausalLM": ArchitectureSpec(gguf.MODEL_ARCH.QWEN3, qk_norm=True, qkv_bias=False),
    "Qwen2ForCausalLM": ArchitectureSpec(gguf.MODEL_ARCH.QWEN2, qk_norm=False, qkv_bias=True),
})

OUT_TYPES: Mapping[str, tuple[gguf.GGMLQuantizationType, gguf.LlamaFileType]] = MappingProxyType({
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
})

# Pre-tokenizer split regex -> llama.cpp pre-tokenizer name (llama.cpp identifies it by hashing a tokenization).
_PRE_TOKENIZERS = MappingProxyType({QWEN2_SPLIT_PATTERN: "qwen2"})
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})

# Rows of a tensor are read, widened and encoded this many float32 bytes at a time (at least one row).
STREAM_CHUNK_BYTES = 16 * 2**20
# safetensors dtype -> numpy dtype of the stored elements (BF16 as raw 16-bit words: numpy has no bfloat16).
_SAFETENSORS_DTYPES = MappingProxyType({"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16})
_MAX_SAFETENSORS_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
# config.json size -> (the GGUF key whose bound it takes, venus_edge.memory.header.MODEL_BOUNDS; required).
_CONFIG_SIZES = MappingProxyType({
    "num_hidden_layers": ("block_count", True), "hidden_size": ("embedding_length", True),
    "intermediate_size": ("feed_forward_length", True), "num_attention_heads": ("attention.head_count", True),
    "num_key_value_heads": ("attention.head_count_kv", True), "head_dim": ("attention.key_length", False),
    "vocab_size": ("vocab_size", True), "max_position_embeddings": ("context_length", True),
})


@dataclass(frozen=True)
class _SourceTensor:
    """One tensor of the checkpoint: where it is and what its header says."""

    name: str  # HF name, e.g. model.layers.0.self_attn.q_proj.weight
    shard: str  # safetensors file name inside the checkpoint folder
    dtype: str  # safetensors dtype: F64, F32, F16, BF16
    shape: tuple[int, ...]  # PyTorch order (rows, cols)
    data_offset: int  # byte offset of the tensor's first element in the shard file


@dataclass(frozen=True)
class _PlannedTensor:
    source: _SourceTensor
    gguf_name: str
    qtype: gguf.GGMLQuantizationType

    @property
    def nbytes(self) -> int:
        """Size of the encoded tensor in the GGUF file, without alignment padding."""
        return math.prod(gguf.quant_shape_to_byte_shape(self.source.shape, self.qtype))


# ---------------------------------------------------------------------------------------------- source


def resolve_checkpoint(source: str | os.PathLike[str]) -> tuple[Path, str | None]:
    """A local checkpoint folder, or a hub repo id fetched with `huggingface_hub.snapshot_download`.

    The hub path respects the Hugging Face cache and `HF_HUB_OFFLINE`.
    Returns:
        (folder, repo id or None for a local folder).
    Raises:
        CheckpointNotFoundError: neither a folder nor a resolvable repository.
    """
    folder = Path(source)
    if folder.is_dir():
        return folder, None
    repo_id = str(source)
    if repo_id.count("/") != 1 or folder.exists() or repo_id.startswith(("/", ".", "~")):  # a path, not an id
        raise CheckpointNotFoundError(repo_id, "no such folder, and not an 'owner/name' hub repository id")
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.jinja", "*.md", "*.txt"]
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns)), repo_id
    except Exception as error:  # huggingface_hub raises several unrelated types for "not available"
        raise CheckpointNotFoundError(repo_id, f"{type(error).__name__}: {error}") from error


def _read_json(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file (config.json, the shard index) as an object.

    Raises:
        CheckpointNotFoundError: the file is missing.
        ConversionError: it is not a readable file of UTF-8 JSON holding an object; the message names it.
    """
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError as error:
        raise CheckpointNotFoundError(str(path.parent), f"{path.name} is missing") from error
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise ConversionError(f"{path} is not valid JSON ({error}); re-download the file.") from error
    except OSError as error:  # a folder in its place, a permission
        raise ConversionError(f"{path} cannot be read ({error.strerror or error}); it must be a file.") from error
    if not isinstance(data, dict):
        raise ConversionError(f"{path} holds a JSON {type(data).__name__}, not an object; re-download the file.")
    return data


#: What to do about a config.json value the checks refuse.
_CONFIG_FIX = "Fix config.json, or use the config that belongs to this checkpoint."


def _check_config(hparams: dict[str, Any], config_path: Path) -> None:
    """Each size config.json gives is an integer within the runtime's bounds (``MODEL_BOUNDS`` of the GGUF key it
    becomes), before any loop or allocation uses it; the tensors' shapes are checked against it next.

    Raises:
        ConversionError: a size missing, not an integer, or out of bounds; the message names the file and value.
    """
    for key, (gguf_key, required) in _CONFIG_SIZES.items():
        value = hparams.get(key)
        if value is None and not required:
            continue
        lowest, highest = MODEL_BOUNDS[gguf_key]
        if not isinstance(value, int) or isinstance(value, bool) or not max(lowest, 1) <= value <= highest:
            shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else repr(value)
            raise ConversionError(f"{config_path}: {key} is {shown}; it must be an integer in [{max(lowest, 1):,}, "
                                  f"{highest:,}]. {_CONFIG_FIX}")
    rope = hparams.get("rope_parameters")
    if rope is not None and not isinstance(rope, dict):
        raise ConversionError(f"{config_path}: rope_parameters is {rope!r}; it must be an object. {_CONFIG_FIX}")
    # Floats llama.cpp asserts on (a NaN eps aborted two threads and hung the verify) or divides by.
    for name, value, low, high, required in (
            ("rms_norm_eps", hparams.get("rms_norm_eps"), 0.0, 1.0, True),
            ("rope_theta", (rope or {}).get("rope_theta", hparams.get("rope_theta")), 1.0, 1e12, False)):
        if value is None and not required:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not low <= value <= high:
            raise ConversionError(f"{config_path}: {name} is {value!r}; it must be a number in [{low:g}, "
                                  f"{high:g}]. {_CONFIG_FIX}")


def _architecture(hparams: dict[str, Any], config_path: Path) -> ArchitectureSpec:
    names = hparams.get("architectures") or []
    if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
        raise ConversionError(f"{config_path}: architectures is {names!r}; it must be a list of names such as "
                              f'["Qwen3ForCausalLM"]. {_CONFIG_FIX}')
    spec = next((ARCHITECTURES[name] for name in names if name in ARCHITECTURES), None)
    if spec is None:
        raise UnsupportedArchitectureError(names or None, list(ARCHITECTURES), config_path)
    return spec


def _shard_names(folder: Path) -> tuple[list[str], dict[str, str]]:
    """(sorted shard file names, weight map from the index or {}), as llama.cpp's `index_tensors`."""
    index_path = folder / "model.safetensors.index.json"
    if index_path.is_file():
        weight_map = _read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ConversionError(f"{index_path} has no 'weight_map' object; re-download the index file.")
        for name, shard in weight_map.items():  # a file name in this folder, never a path out of it
            if not isinstance(shard, str) or not shard.endswith(".safetensors") or Path(shard).name != shard:
                raise ConversionError(f"{index_path}: weight_map names {shard!r} for {name}; a shard is the name of a "
                                      ".safetensors file in the checkpoint's folder. Re-download the index file.")
        return sorted(set(weight_map.values())), weight_map
    shards = sorted(path.name for path in folder.glob("model*.safetensors"))
    if not shards:
        raise CheckpointNotFoundError(str(folder), "no model*.safetensors file")
    return shards, {}


def _read_safetensors_header(path: Path) -> list[_SourceTensor]:
    """The tensors of one safetensors file, sorted by name, from its header (the data is not read).

    Format (huggingface/safetensors README): an 8-byte little-endian header length N, N bytes of JSON
    {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__"}, then the data; offsets
    count from the first byte after the header.
    Raises:
        ConversionError: the header is truncated or not JSON, a dtype is not F64/F32/F16/BF16, or a tensor's
            byte range does not match its shape or lies past the end of the file.
    """
    def corrupt(reason: str) -> ConversionError:
        return ConversionError(f"{path}: {reason}; the file is truncated or corrupt, re-download it.")

    file_size = path.stat().st_size
    with open(path, "rb") as file:
        header_size = int.from_bytes(file.read(8), "little")
        if file_size < 8 or header_size > min(file_size - 8, _MAX_SAFETENSORS_HEADER_BYTES):
            raise corrupt(f"header length is {header_size} bytes; the file has {file_size}")
        try:
            header = json.loads(file.read(header_size))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise corrupt(f"header is not valid JSON ({error})") from error
        except RecursionError as error:  # arrays or objects nested past Python's recursion limit
            raise corrupt("header is JSON nested too deep to be a safetensors header") from error
    if not isinstance(header, dict):
        raise corrupt("header is not a JSON object")
    tensors, ranges = [], []  # ranges: (begin, end, name) of each tensor's bytes, checked below for overlaps
    for name in sorted(key for key in header if key != "__metadata__"):
        entry = header[name]
        entry = entry if isinstance(entry, dict) else {"entry": entry}
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(dtype, str) and _naturals(shape) and _naturals(offsets) and len(offsets) == 2):
            shown = repr(header[name])
            raise corrupt(f"header entry of {name} is {shown[:200]}{'...' if len(shown) > 200 else ''}; expected "
                          f"dtype, a shape and data_offsets [begin, end] of non-negative integers")
        shape, (begin, end) = tuple(shape), offsets
        if dtype not in _SAFETENSORS_DTYPES:
            raise ConversionError(
                f"{path}: tensor {name} has dtype {dtype}; this converter reads {', '.join(_SAFETENSORS_DTYPES)}. "
                "Save the checkpoint in a float dtype, or convert with llama.cpp's convert_hf_to_gguf.py."
            )
        expected_bytes = math.prod(shape) * np.dtype(_SAFETENSORS_DTYPES[dtype]).itemsize
        if end - begin != expected_bytes or begin < 0 or 8 + header_size + end > file_size:
            raise corrupt(f"tensor {name} ({dtype}, shape {shape}) has data_offsets [{begin}, {end}]; "
                          f"expected {expected_bytes} bytes inside the file's {file_size}")
        tensors.append(_SourceTensor(name, path.name, dtype, shape, 8 + header_size + begin))
        ranges.append((begin, end, name))
    for (_, end, first), (begin, _, second) in itertools.pairwise(sorted(ranges)):
        if begin < end:  # one tensor's bytes read as another's: the norm written from the embedding
            raise corrupt(f"tensors {first} and {second} share bytes (their data_offsets overlap)")
    return tensors


def _naturals(value: Any) -> TypeGuard[list[int]]:
    """A JSON list of non-negative integers (not floats, not booleans, not Infinity)."""
    return isinstance(value, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)


def _index_tensors(folder: Path) -> tuple[dict[str, _SourceTensor], dict[str, str]]:
    """Read every shard's header (not its data): HF name -> tensor, plus the index's weight map."""
    shard_names, weight_map = _shard_names(folder)
    tensors: dict[str, _SourceTensor] = {}
    for shard in shard_names:
        if not (folder / shard).is_file():
            missing = {name: shard for name, file in weight_map.items() if file == shard}
            raise MissingTensorError(missing, {}, folder)
        tensors |= {tensor.name: tensor for tensor in _read_safetensors_header(folder / shard)}
    return tensors, weight_map


def _expected_shapes(hparams: dict[str, Any], spec: ArchitectureSpec) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape that config.json implies (Qwen2/Qwen3 decoder layout)."""
    hidden, n_head, n_kv = hparams["hidden_size"], hparams["num_attention_heads"], hparams["num_key_value_heads"]
    head_dim = hparams.get("head_dim") or hidden // n_head
    ffn, vocab = hparams["intermediate_size"], hparams["vocab_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    for layer in range(hparams["num_hidden_layers"]):
        attn, mlp = f"model.layers.{layer}.self_attn", f"model.layers.{layer}.mlp"
        shapes |= {
            f"model.layers.{layer}.input_layernorm.weight": (hidden,),
            f"model.layers.{layer}.post_attention_layernorm.weight": (hidden,),
            f"{attn}.q_proj.weight": (n_head * head_dim, hidden),
            f"{attn}.k_proj.weight": (n_kv * head_dim, hidden),
            f"{attn}.v_proj.weight": (n_kv * head_dim, hidden),
            f"{attn}.o_proj.weight": (hidden, n_head * head_dim),
            f"{mlp}.gate_proj.weight": (ffn, hidden),
            f"{mlp}.up_proj.weight": (ffn, hidden),
            f"{mlp}.down_proj.weight": (hidden, ffn),
        }
        if spec.qk_norm:
            shapes |= {f"{attn}.q_norm.weight": (head_dim,), f"{attn}.k_norm.weight": (head_dim,)}
        if spec.qkv_bias:
            shapes |= {
                f"{attn}.q_proj.bias": (n_head * head_dim,),
                f"{attn}.k_proj.bias": (n_kv * head_dim,),
                f"{attn}.v_proj.bias": (n_kv * head_dim,),
            }
    if not hparams.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def _check_tensors(
    tensors: Mapping[str, _SourceTensor], expected: Mapping[str, tuple[int, ...]], weight_map: Mapping[str, str],
    folder: Path, hparams: dict[str, Any],
) -> None:
    """Raise MissingTensorError / TensorShapeError before anything is written."""
    optional = {"lm_head.weight": (hparams["vocab_size"], hparams["hidden_size"])}  # saved by some tied checkpoints
    default_shard = "model.safetensors" if not weight_map else "the shard named in the index"
    missing = {name: weight_map.get(name, default_shard) for name in expected if name not in tensors}
    extra = {name: t.shard for name, t in tensors.items() if name not in expected and name not in optional}
    if missing or extra:
        raise MissingTensorError(missing, extra, folder)
    for name, tensor in tensors.items():
        want = expected.get(name) or optional[name]
        if tensor.shape != want:
            raise TensorShapeError(name, tensor.shard, tensor.shape, want)


def _plan(
    tensors: Mapping[str, _SourceTensor], spec: ArchitectureSpec, n_layers: int,
    out_qtype: gguf.GGMLQuantizationType, folder: Path,
) -> list[_PlannedTensor]:
    """GGUF name and type of every tensor; 1-D tensors (norms, biases) stay F32 as in `prepare_tensors`."""
    name_map = gguf.get_tensor_name_map(spec.gguf_arch, n_layers)
    planned = []
    for tensor in tensors.values():
        gguf_name = name_map.get_name(tensor.name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise MissingTensorError({}, {tensor.name: tensor.shard}, folder)
        qtype = gguf.GGMLQuantizationType.F32 if len(tensor.shape) <= 1 else out_qtype
        planned.append(_PlannedTensor(tensor, gguf_name, qtype))
    return planned


# ---------------------------------------------------------------------------------------------- tensors


def _read_exact(file: io.RawIOBase, offset: int, into: memoryview, path: Path, name: str) -> None:
    """Fill `into` with the file's bytes from `offset`, looping over short reads."""
    file.seek(offset)
    filled = 0
    try:
        while filled < len(into):
            count = file.readinto(into[filled:])
            if not count:
                raise ConversionError(f"{path}: file ends inside tensor {name}; the file is truncated, re-download it.")
            filled += count
    except OSError as error:
        raise ConversionError(f"{path}: reading tensor {name} failed ({type(error).__name__}: {error}).") from error


def _row_blocks(file: io.RawIOBase, path: Path, tensor: _SourceTensor, chunk_bytes: int) -> Iterator[np.ndarray]:
    """The tensor as consecutive blocks of rows (first axis), each float16 or float32 of shape (rows, *shape[1:]).

    Rows per block: `chunk_bytes` // (row size in float32 bytes), at least one. F16 and F32 come as stored; BF16 is
    widened exactly to float32 by shifting its 16-bit words into the top half (as llama.cpp does), F64 is cast
    to float32 as numpy's astype does. The arrays are views of two buffers reused from block to block: encode
    each block before taking the next.
    """
    stored = np.dtype(_SAFETENSORS_DTYPES[tensor.dtype])
    n_rows = tensor.shape[0] if tensor.shape else 1
    row_shape = tensor.shape[1:]
    row_elements = math.prod(row_shape)
    rows_per_block = max(1, min(n_rows, chunk_bytes // max(1, row_elements * 4)))
    raw = np.empty(rows_per_block * row_elements, dtype=stored)
    widened = np.empty(raw.size, dtype=np.float32) if tensor.dtype in ("BF16", "F64") else None
    for first in range(0, n_rows, rows_per_block):
        rows = min(rows_per_block, n_rows - first)
        size = rows * row_elements
        _read_exact(file, tensor.data_offset + first * row_elements * stored.itemsize,
                    raw[:size].view(np.uint8).data, path, tensor.name)
        if widened is None:
            block = raw[:size]
        elif tensor.dtype == "BF16":
            block = widened[:size]
            words = block.view(np.uint32)
            words[:] = raw[:size]
            words <<= 16
        else:
            block = widened[:size]
            block[:] = raw[:size]
        yield block.reshape((rows, *row_shape) if tensor.shape else ())


def _encode(array: np.ndarray, qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """F32 / F16 / BF16 encoding with gguf's own routines (BF16 rounds to nearest even); elementwise."""
    return gguf.quants.quantize(array, qtype)


def _add_tensor_infos(writer: gguf.GGUFWriter, planned: list[_PlannedTensor]) -> None:
    for item in planned:
        byte_shape = gguf.quant_shape_to_byte_shape(item.source.shape, item.qtype)
        writer.add_tensor_info(item.gguf_name, byte_shape, np.dtype(np.uint8), item.nbytes, raw_dtype=item.qtype)


def _write_tensor(
    out: io.BufferedWriter, source: io.RawIOBase, path: Path, item: _PlannedTensor, chunk_bytes: int,
) -> None:
    """Encode and append one tensor block by block; the bytes are those of encoding it whole."""
    written = 0
    for block in _row_blocks(source, path, item.source, chunk_bytes):
        encoded = _encode(block, item.qtype)
        out.write(np.ascontiguousarray(encoded).data.cast("B"))
        written += encoded.nbytes
    if written != item.nbytes:  # the tensor info already promised item.nbytes at a fixed offset
        raise ConversionError(f"{item.source.name}: encoded {written} bytes; the GGUF tensor info says {item.nbytes}.")


def _write_tensors(
    writer: gguf.GGUFWriter, folder: Path, planned: list[_PlannedTensor], chunk_bytes: int | None = None
) -> None:
    """Write the tensor data section, in plan order, after the writer has written the tensor infos.

    The layout is that of `GGUFWriter.write_tensor_data` (gguf-py gguf_writer.py): zeros up to the writer's
    `data_alignment` before the first tensor, and after each tensor zeros up to a multiple of the alignment,
    matching the offsets `write_ti_data_to_file` stored. `chunk_bytes` defaults to `STREAM_CHUNK_BYTES`.
    """
    chunk_bytes = STREAM_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    assert writer.fout is not None and len(writer.fout) == 1  # opened by write_header_to_file; made without splits
    out = writer.fout[0]
    writer.write_padding(out, out.tell())
    with contextlib.ExitStack() as stack:
        sources: dict[str, io.RawIOBase] = {}
        for item in planned:
            shard = item.source.shard
            if shard not in sources:
                sources[shard] = stack.enter_context(open(folder / shard, "rb", buffering=0))
            _write_tensor(out, sources[shard], folder / shard, item, chunk_bytes)
            writer.write_padding(out, item.nbytes)


# ---------------------------------------------------------------------------------------------- metadata


def _add_hparams(writer: gguf.GGUFWriter, hparams: dict[str, Any], file_type: gguf.LlamaFileType) -> None:
    """Hyper-parameters as in `TextModel.set_gguf_parameters` (conversion/base.py)."""
    if hparams.get("rope_scaling") not in (None, {}):
        raise ConversionError(
            f"config.json rope_scaling is {hparams['rope_scaling']!r}; this converter supports none. "
            "Remove rope_scaling for a native-context model, or convert with llama.cpp's convert_hf_to_gguf.py."
        )
    rope_theta = (hparams.get("rope_parameters") or {}).get("rope_theta", hparams.get("rope_theta"))
    writer.add_block_count(hparams["num_hidden_layers"])
    writer.add_context_length(hparams["max_position_embeddings"])
    writer.add_embedding_length(hparams["hidden_size"])
    writer.add_feed_forward_length(hparams["intermediate_size"])
    writer.add_head_count(hparams["num_attention_heads"])
    writer.add_head_count_kv(hparams["num_key_value_heads"])
    if rope_theta is not None:
        writer.add_rope_freq_base(rope_theta)
    writer.add_layer_norm_rms_eps(hparams["rms_norm_eps"])
    if (head_dim := hparams.get("head_dim")) is not None:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_file_type(file_type)


def _check_tokenizer_files(folder: Path) -> None:
    """Both tokenizer files are there and hold JSON objects (``vocab_tokens`` reads the tokenizer itself).

    Raises:
        TokenizerFilesMissingError: a file is missing.
        ConversionError: a file is not a JSON object; the message names it.
    """
    missing = [name for name in _TOKENIZER_FILES if not (folder / name).is_file()]
    if missing:
        raise TokenizerFilesMissingError(missing, folder)
    for name in _TOKENIZER_FILES:
        _read_json(folder / name)


def _pre_tokenizer_name(tokenizer_json: dict[str, Any], path: Path) -> str:
    """llama.cpp's pre-tokenizer name, from the Split regex in tokenizer.json."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if isinstance(pre, dict) else []
    patterns = [step["pattern"].get("Regex") for step in steps if isinstance(step, dict) and
                step.get("type") == "Split" and isinstance(step.get("pattern"), dict)]
    for pattern in patterns:
        if pattern in _PRE_TOKENIZERS:
            return _PRE_TOKENIZERS[pattern]
    raise ConversionError(
        f"{path}: pre-tokenizer split regex {patterns!r} is not one this converter knows "
        f"(known: {', '.join(_PRE_TOKENIZERS.values())}); convert with llama.cpp's convert_hf_to_gguf.py."
    )


def _looks_special(token: str) -> bool:
    """`does_token_look_special` in conversion/base.py, for the token shapes of byte-level BPE vocabularies."""
    return (token.startswith("<|") and token.endswith("|>")) or token == "<pad>"


def vocab_tokens(folder: Path, vocab_size: int) -> tuple[list[str], list[int]]:
    """Token texts and GGUF token types for ids 0..vocab_size-1, as llama.cpp's `get_vocab_base`.

    Ids without a token become `[PAD{id}]` (UNUSED); added tokens are CONTROL when special or shaped like
    `<|...|>`, else USER_DEFINED; all others are NORMAL.

    Raises:
        ConversionError: tokenizer.json is not a tokenizer the tokenizers library reads, or holds ids past
            ``vocab_size``.
    """
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as error:  # tokenizers raises a bare Exception for a file it cannot read
        raise ConversionError(f"{folder / 'tokenizer.json'} is not a tokenizer the tokenizers library reads "
                              f"({error}); copy it from the base model's repository.") from error
    by_id = {token_id: text for text, token_id in tokenizer.get_vocab(with_added_tokens=True).items()}
    added = tokenizer.get_added_tokens_decoder()
    if by_id and max(by_id) >= vocab_size:
        raise ConversionError(
            f"{folder}: tokenizer has token id {max(by_id)}; config.json vocab_size is {vocab_size}. "
            "Use the tokenizer that belongs to this checkpoint."
        )
    # gguf.TokenType is an IntEnum; the writer takes the plain ints
    tokens: list[str] = []
    types: list[int] = []
    for token_id in range(vocab_size):
        text = by_id.get(token_id)
        if text is None:
            tokens.append(f"[PAD{token_id}]")
            types.append(gguf.TokenType.UNUSED)
        elif token_id in added:
            if not added[token_id].normalized:
                text = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False).ids, skip_special_tokens=False)
            is_control = added[token_id].special or _looks_special(text)
            tokens.append(text if is_control else text.replace("\u2581", " "))
            types.append(gguf.TokenType.CONTROL if is_control else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(text)
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def _add_vocab(writer: gguf.GGUFWriter, folder: Path, vocab_size: int) -> None:
    """Tokenizer keys as `_set_vocab_gpt2`: model gpt2, pre-tokenizer, tokens, types, then `gguf.SpecialVocab`."""
    tokenizer_path = folder / "tokenizer.json"
    tokens, types = vocab_tokens(folder, vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_tokenizer_name(_read_json(tokenizer_path), tokenizer_path))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(folder, load_merges=True, n_vocab=vocab_size).add_to_gguf(writer, quiet=True)


def _add_general(writer: gguf.GGUFWriter, folder: Path, repo_id: str | None, total_params: int) -> None:
    """general.* keys through `gguf.Metadata`, as `prepare_metadata` in conversion/base.py."""
    metadata = gguf.Metadata.load(None, folder, None, total_params)
    metadata.name = repo_id or metadata.name or folder.name
    if repo_id and metadata.source_repo_url is None:
        metadata.source_repo_url = f"https://huggingface.co/{repo_id}"
    if metadata.size_label is None and total_params > 0:
        metadata.size_label = gguf.size_label(total_params, 0, 0, 0)
    writer.add_type(gguf.GGUFType.MODEL)
    metadata.set_gguf_meta_model(writer)


# ---------------------------------------------------------------------------------------------- output


def _is_disk_full(error: OSError) -> bool:
    """ENOSPC / EFBIG (RLIMIT_FSIZE) / EDQUOT."""
    return error.errno in _DISK_FULL_ERRNOS


def _write_gguf(
    writer: gguf.GGUFWriter, path: Path, folder: Path, planned: list[_PlannedTensor], out_path: Path
) -> None:
    needed_bytes = sum(item.nbytes for item in planned)
    try:
        writer.write_header_to_file(path=path)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        _write_tensors(writer, folder, planned)
        writer.close()
    except OSError as error:
        with contextlib.suppress(OSError):
            writer.close()
        if _is_disk_full(error):
            raise DiskFullError(out_path, needed_bytes, f"{type(error).__name__}: {error}") from error
        raise OutputNotWritableError(out_path, f"{type(error).__name__}: {error}") from error
    except BaseException:
        with contextlib.suppress(OSError):
            writer.close()
        raise


def convert_checkpoint(
    source: str | os.PathLike[str], out_path: str | os.PathLike[str], *, out_type: str = "f16"
) -> Path:
    """Convert a Qwen3 (or Qwen2) safetensors checkpoint to a GGUF file.

    Args:
        source: checkpoint folder (config.json, *.safetensors [+ index], tokenizer.json, tokenizer_config.json),
            or a hub repo id resolved through the Hugging Face cache.
        out_path: the .gguf file to write; its folder must exist. Replaced atomically when complete.
        out_type: "f32", "f16" or "bf16" for 2-D weights; 1-D tensors (norms) are always F32.
    Returns:
        `out_path` as a Path.
    Raises:
        ValueError: unknown out_type.
        CheckpointNotFoundError, UnsupportedArchitectureError, MissingTensorError, TensorShapeError,
        TokenizerFilesMissingError: the checkpoint is unusable (checked before the output is created).
        OutputNotWritableError, DiskFullError: writing failed; no partial file is left.
    """
    if out_type not in OUT_TYPES:
        raise ValueError(f"out_type is {out_type!r}; expected one of {', '.join(OUT_TYPES)}")
    out_qtype, file_type = OUT_TYPES[out_type]
    out_path = Path(out_path)
    check_output_path(out_path)
    folder, repo_id = resolve_checkpoint(source)
    hparams = _read_json(folder / "config.json")
    spec = _architecture(hparams, folder / "config.json")
    _check_config(hparams, folder / "config.json")
    _check_tokenizer_files(folder)
    tensors, weight_map = _index_tensors(folder)
    _check_tensors(tensors, _expected_shapes(hparams, spec), weight_map, folder, hparams)
    planned = _plan(tensors, spec, hparams["num_hidden_layers"], out_qtype, folder)

    writer = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[spec.gguf_arch])
    _add_general(writer, folder, repo_id, sum(int(np.prod(p.source.shape)) for p in planned))
    _add_hparams(writer, hparams, file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _add_vocab(writer, folder, hparams["vocab_size"])
    _add_tensor_infos(writer, planned)

    with temporary_output(out_path) as temp_path:
        _write_gguf(writer, temp_path, folder, planned, out_path)
    return out_path
