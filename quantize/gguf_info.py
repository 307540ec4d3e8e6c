"""`inspect_gguf`: the facts of a GGUF file (metadata, tokenizer, tensor types), and `read_gguf_header`, the
project's one GGUF header reader (`venus_edge.memory.header`) with its errors as this part's `GGUFReadError`.

The reader reads the header (metadata and tensor infos, not tensor data) in one pass with `struct` and checks
that the tensor data the header promises is present; `gguf.GGUFReader` would take ~7 s on the Qwen vocabulary.
A test checks the two agree. Numeric arrays come back as tuples and string arrays as tuples of strings; a tensor's
`ggml_type` is the ggml type id (`ggml_type_name` gives gguf's name for it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from venus_edge.errors import ModelLoadError, ModelNotFoundError
from venus_edge.memory.header import GGUFHeader, StringArray, TensorInfo
from venus_edge.memory.header import read_gguf_header as _read_header

from .errors import GGUFReadError

__all__ = ["GGUFHeader", "TensorInfo", "ggml_type_name", "inspect_gguf", "read_gguf_header"]


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """Read a GGUF file's metadata (string arrays decoded) and tensor infos, and check its tensor data is all there.

    Raises:
        GGUFReadError: the file is missing, empty, not GGUF, corrupt or truncated (message has the path).
    """
    try:
        return _read_header(path, decode_strings=True)
    except ModelNotFoundError as error:  # no file there: the path is wrong, the file need not be made again
        raise GGUFReadError(Path(path), error.reason, advice="" if Path(path).is_dir() else "Check the path.") \
            from error
    except ModelLoadError as error:
        raise GGUFReadError(Path(path), error.reason) from error


def ggml_type_name(ggml_type: int) -> str:
    """gguf's name of a ggml type id (`F16`, `Q4_K`), or `type N` for an id newer than the installed gguf."""
    try:
        return gguf.GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type {ggml_type}"


def _tokenizer_facts(metadata: Mapping[str, Any]) -> dict[str, Any]:
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
    if isinstance(value, (list, tuple, np.ndarray, StringArray)):
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
        "tensor_types": dict(Counter(ggml_type_name(tensor.ggml_type) for tensor in header.tensors)),
        "tokenizer": _tokenizer_facts(header.metadata),
        "metadata": {key: _summarize(value) for key, value in header.metadata.items()},
    }
