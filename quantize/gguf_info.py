"""A one-pass GGUF header reader, and `inspect_gguf` built on it.

`gguf.GGUFReader` builds a numpy view for every string of the vocabulary: ~7 s for the 151,936-token Qwen
vocabulary on the 2-core project machine. This module reads the same header (metadata and tensor infos,
not tensor data) in one pass with `struct`, in well under a second, and checks that the tensor data the
header promises is present. A test checks it agrees with `gguf.GGUFReader`.

Format: GGUF v2/v3 as written by `gguf.GGUFWriter` (gguf-py/gguf/gguf_writer.py) and read by
`gguf_reader.py`: magic, version, tensor count, KV count, KV pairs, tensor infos, padding to
`general.alignment`, tensor data.
"""

from __future__ import annotations

import mmap
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from .errors import GGUFReadError

__all__ = ["GGUFHeader", "TensorInfo", "inspect_gguf", "read_gguf_header"]

_SCALAR_FORMATS = {
    gguf.GGUFValueType.UINT8: "<B", gguf.GGUFValueType.INT8: "<b",
    gguf.GGUFValueType.UINT16: "<H", gguf.GGUFValueType.INT16: "<h",
    gguf.GGUFValueType.UINT32: "<I", gguf.GGUFValueType.INT32: "<i",
    gguf.GGUFValueType.UINT64: "<Q", gguf.GGUFValueType.INT64: "<q",
    gguf.GGUFValueType.FLOAT32: "<f", gguf.GGUFValueType.FLOAT64: "<d",
    gguf.GGUFValueType.BOOL: "<?",
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry. `shape` is in ggml order (row length first); `offset` is from the data start."""

    name: str
    shape: tuple[int, ...]
    ggml_type: gguf.GGMLQuantizationType
    offset: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape))

    @property
    def n_bytes(self) -> int:
        block_size, type_size = gguf.GGML_QUANT_SIZES[self.ggml_type]
        return self.n_elements // block_size * type_size


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    metadata: dict[str, Any]  # key -> scalar, str, list[str], or numpy array for numeric arrays
    tensors: tuple[TensorInfo, ...]
    data_offset: int  # bytes from the file start to the first tensor's data
    file_size_bytes: int


class _Cursor:
    """Little-endian reads from a buffer; running past its end raises GGUFReadError."""

    def __init__(self, buffer: memoryview, path: Path) -> None:
        self.buffer, self.position, self.path = buffer, 0, path

    def take(self, n_bytes: int) -> memoryview:
        end = self.position + n_bytes
        if end > len(self.buffer):
            raise GGUFReadError(self.path, f"truncated: header needs byte {end:,}, the file has {len(self.buffer):,}")
        view = self.buffer[self.position : end]
        self.position = end
        return view

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.take(self.scalar("<Q"))
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as error:
            raise GGUFReadError(self.path, f"corrupt string at byte {self.position:,}: {error}") from error

    def value(self, value_type: gguf.GGUFValueType) -> Any:
        if value_type == gguf.GGUFValueType.STRING:
            return self.string()
        if value_type == gguf.GGUFValueType.ARRAY:
            return self.array()
        if value_type not in _SCALAR_FORMATS:
            raise GGUFReadError(self.path, f"corrupt metadata: unknown value type {value_type} at byte {self.position:,}")
        return self.scalar(_SCALAR_FORMATS[value_type])

    def value_type(self) -> gguf.GGUFValueType:
        raw = self.scalar("<I")
        try:
            return gguf.GGUFValueType(raw)
        except ValueError as error:
            raise GGUFReadError(self.path, f"corrupt metadata: value type {raw} at byte {self.position:,}") from error

    def array(self) -> Any:
        item_type, count = self.value_type(), self.scalar("<Q")
        if item_type in _SCALAR_FORMATS:
            item_format = _SCALAR_FORMATS[item_type]
            raw = self.take(count * struct.calcsize(item_format))
            return np.frombuffer(raw, dtype=np.dtype(item_format)).copy()
        return [self.value(item_type) for _ in range(count)]


def _read_tensor_info(cursor: _Cursor) -> TensorInfo:
    name = cursor.string()
    n_dims = cursor.scalar("<I")
    shape = tuple(cursor.scalar("<Q") for _ in range(n_dims))
    raw_type = cursor.scalar("<I")
    try:
        ggml_type = gguf.GGMLQuantizationType(raw_type)
    except ValueError as error:
        raise GGUFReadError(cursor.path, f"tensor {name!r} has unknown ggml type {raw_type}") from error
    return TensorInfo(name, shape, ggml_type, cursor.scalar("<Q"))


def _parse(buffer: memoryview, path: Path) -> GGUFHeader:
    cursor = _Cursor(buffer, path)
    magic = cursor.scalar("<I")
    if magic != gguf.GGUF_MAGIC:
        raise GGUFReadError(path, f"not a GGUF file: magic is {magic:#010x}, expected {gguf.GGUF_MAGIC:#010x}")
    version = cursor.scalar("<I")
    if version not in (2, 3):
        raise GGUFReadError(path, f"GGUF version is {version}; expected 2 or 3")
    n_tensors, n_kv = cursor.scalar("<Q"), cursor.scalar("<Q")
    metadata = {}
    for _ in range(n_kv):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.value_type())
    tensors = tuple(_read_tensor_info(cursor) for _ in range(n_tensors))
    alignment = int(metadata.get(gguf.Keys.General.ALIGNMENT, gguf.GGUF_DEFAULT_ALIGNMENT))
    data_offset = -(-cursor.position // alignment) * alignment
    return GGUFHeader(path, version, metadata, tensors, data_offset, len(buffer))


def _check_data_present(header: GGUFHeader) -> None:
    if not header.tensors:
        return
    last = max(header.tensors, key=lambda tensor: tensor.offset + tensor.n_bytes)
    needed_bytes = header.data_offset + last.offset + last.n_bytes
    if needed_bytes > header.file_size_bytes:
        raise GGUFReadError(
            header.path,
            f"truncated: tensor {last.name} ends at byte {needed_bytes:,}, the file has {header.file_size_bytes:,}",
        )


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """Read a GGUF file's metadata and tensor infos, and check its tensor data is all there.

    Raises:
        GGUFReadError: the file is missing, empty, not GGUF, corrupt or truncated (message has the path).
    """
    path = Path(path)
    try:
        with open(path, "rb") as file:
            if path.stat().st_size == 0:
                raise GGUFReadError(path, "the file is empty (0 bytes)")
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    header = _parse(view, path)
                finally:
                    view.release()
    except OSError as error:
        raise GGUFReadError(path, f"{type(error).__name__}: {error}") from error
    _check_data_present(header)
    return header


def _tokenizer_facts(metadata: dict[str, Any]) -> dict[str, Any]:
    tokenizer = gguf.Keys.Tokenizer
    token_types = metadata.get(tokenizer.TOKEN_TYPE, np.array([], dtype=np.int32))
    type_counts = {gguf.TokenType(int(v)).name: int(n) for v, n in zip(*np.unique(token_types, return_counts=True))}
    return {
        "model": metadata.get(tokenizer.MODEL),
        "pre": metadata.get(tokenizer.PRE),
        "n_tokens": len(metadata.get(tokenizer.LIST, [])),
        "n_merges": len(metadata.get(tokenizer.MERGES, [])),
        "token_type_counts": type_counts,
        "bos_token_id": metadata.get(tokenizer.BOS_ID),
        "eos_token_id": metadata.get(tokenizer.EOS_ID),
        "padding_token_id": metadata.get(tokenizer.PAD_ID),
        "add_bos_token": metadata.get(tokenizer.ADD_BOS),
        "has_chat_template": tokenizer.CHAT_TEMPLATE in metadata,
    }


def _summarize(value: Any) -> Any:
    """Scalars and strings as they are; arrays as their length (the vocabulary would be 150k entries)."""
    if isinstance(value, (list, np.ndarray)):
        return f"<array of {len(value)}>"
    return value


def inspect_gguf(path: str | Path) -> dict[str, Any]:
    """Facts about a GGUF file: metadata, tokenizer, tensor type counts.

    Returns:
        {"path", "architecture", "file_type", "n_tensors", "n_parameters", "size_bytes",
         "tensor_types": {type name: count}, "tokenizer": {...}, "metadata": {key: value or "<array of N>"}}
    Raises:
        GGUFReadError: missing, corrupt or truncated file (the message names the path).
    """
    header = read_gguf_header(path)
    file_type = header.metadata.get(gguf.Keys.General.FILE_TYPE)
    return {
        "path": str(header.path),
        "architecture": header.metadata.get(gguf.Keys.General.ARCHITECTURE),
        "file_type": gguf.LlamaFileType(file_type).name if file_type is not None else None,
        "n_tensors": len(header.tensors),
        "n_parameters": sum(tensor.n_elements for tensor in header.tensors),
        "size_bytes": header.file_size_bytes,
        "tensor_types": dict(Counter(tensor.ggml_type.name for tensor in header.tensors)),
        "tokenizer": _tokenizer_facts(header.metadata),
        "metadata": {key: _summarize(value) for key, value in header.metadata.items()},
    }
