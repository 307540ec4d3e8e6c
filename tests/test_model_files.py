"""GGUF files that lie (issue 25, kind 4): every value the header reader takes from a file is checked against
bounds, and against the tensors the file holds, before a plan or llama.cpp sees it; the message names the file,
the key and the value. Should llama.cpp still abort, its own message reaches standard error; should it refuse a
file, its error lines are in the ``ModelLoadError``.

Each file is a copy of SmolLM2 with bytes of its header patched in place (same sizes, so the rest stays valid).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.errors import ModelLoadError
from venus_edge.memory import read_model_header
from venus_edge.memory.header import MODEL_BOUNDS, read_gguf_header

HEADER_BYTES = 2_000_000  # SmolLM2's header (vocabulary and merges included) ends before this


def _copy(source: Path, target: Path) -> tuple[Path, bytearray]:
    shutil.copy(source, target)
    with target.open("rb") as handle:
        return target, bytearray(handle.read(HEADER_BYTES))


def _after_string(header: bytes, text: str) -> int:
    """The offset just after the GGUF string ``text`` (its 8-byte length, then its bytes) in the header."""
    raw = text.encode()
    return header.index(struct.pack("<Q", len(raw)) + raw) + 8 + len(raw)


def _patch(path: Path, offset: int, data: bytes) -> Path:
    with path.open("r+b") as handle:
        handle.seek(offset)
        handle.write(data)
    return path


def patched_value(source: Path, target: Path, key: str, value: int) -> Path:
    """A copy of ``source`` whose uint32 metadata value ``key`` is ``value``."""
    path, header = _copy(source, target)
    at = _after_string(header, key)
    assert struct.unpack_from("<I", header, at)[0] == 4, f"{key} is not a uint32 in {source}"
    return _patch(path, at + 4, struct.pack("<I", value))


@pytest.mark.parametrize("key, value, message", [
    ("llama.block_count", 1_000_000_000, "llama.block_count is 1,000,000,000 in the GGUF header; it must be an "
                                         "integer in [1, 512]"),
    ("llama.block_count", 29, "llama.block_count is 29 in the GGUF header, the file holds tensors of 30 blocks"),
    ("llama.block_count", 0, "llama.block_count is 0 in the GGUF header"),
    ("llama.context_length", 4_000_000_000, "llama.context_length is 4,000,000,000"),
    ("llama.embedding_length", 1_000_000_000, "llama.embedding_length is 1,000,000,000"),
    ("llama.embedding_length", 1000, "llama.embedding_length is 1,000 in the GGUF header, tensor token_embd.weight"),
    ("llama.feed_forward_length", 1000, "llama.feed_forward_length is 1,000 in the GGUF header, tensor "
                                        "blk.0.ffn_up.weight"),
    ("llama.attention.head_count", 0, "llama.attention.head_count is 0"),
    ("llama.attention.head_count", 1_000_000, "llama.attention.head_count is 1,000,000"),
    ("llama.attention.head_count_kv", 4, "llama.attention.head_count_kv * key_length is 256 in the GGUF header, "
                                         "tensor blk.0.attn_k.weight"),
    ("llama.vocab_size", 1_000_000_000, "llama.vocab_size is 1,000,000,000"),
    ("llama.vocab_size", 49_000, "llama.vocab_size is 49,000 in the GGUF header, tensor token_embd.weight"),
])
def test_model_values_out_of_bounds_or_against_the_tensors(tmp_path, smollm2_gguf, key, value, message):
    """A dimension beyond its bound, or one the tensors contradict, is refused with the file, key and value."""
    path = patched_value(smollm2_gguf, tmp_path / "lying.gguf", key, value)
    with pytest.raises(ModelLoadError, match=re.escape(message)) as caught:
        read_model_header(path)
    assert str(path) in str(caught.value)


def test_bounds_cover_llama_cpps_own_limits():
    """block_count and expert_count are bounded by LLAMA_MAX_LAYERS and LLAMA_MAX_EXPERTS (src/llama-hparams.h),
    beyond which llama.cpp aborts the process."""
    assert MODEL_BOUNDS["block_count"] == (1, 512) and MODEL_BOUNDS["expert_count"][1] == 1024


def _storage_lies(source: Path, tmp_path: Path) -> dict[str, Path]:
    """Copies of ``source`` whose header counts, lengths, shapes or offsets lie."""
    def copy(name: str) -> tuple[Path, bytearray]:
        return _copy(source, tmp_path / f"{name}.gguf")

    files = {}
    path, _ = copy("n-kv")
    files["n_kv"] = _patch(path, 16, struct.pack("<Q", 1 << 60))
    path, _ = copy("n-tensors")
    files["n_tensors"] = _patch(path, 8, struct.pack("<Q", 1 << 60))
    path, header = copy("array-length")
    files["array length"] = _patch(path, _after_string(header, "tokenizer.ggml.tokens") + 8, struct.pack("<Q", 1 << 40))
    path, header = copy("nested-array")  # tokenizer.ggml.tokens: an array whose items are arrays
    files["nested array"] = _patch(path, _after_string(header, "tokenizer.ggml.tokens") + 4, struct.pack("<I", 9))
    path, header = copy("duplicate-key")  # the key general.type renamed general.name (both 12 bytes)
    files["duplicate key"] = _patch(path, _after_string(header, "general.type") - 12, b"general.name")
    path, header = copy("huge-shape")  # token_embd.weight: 2 dims; the second one 2**62
    at = _after_string(header, "token_embd.weight")
    files["huge shape"] = _patch(path, at + 4 + 8, struct.pack("<Q", 1 << 62))
    path, header = copy("offset-past-end")
    at = _after_string(header, "token_embd.weight")
    files["offset past end"] = _patch(path, at + 4 + 16 + 4, struct.pack("<Q", 1 << 40))
    path, header = copy("offset-unaligned")
    files["offset unaligned"] = _patch(path, _after_string(header, "token_embd.weight") + 4 + 16 + 4,
                                       struct.pack("<Q", 3))
    path, header = copy("dimensions")
    files["dimensions"] = _patch(path, _after_string(header, "token_embd.weight"), struct.pack("<I", 5))
    return files


@pytest.mark.parametrize("case, message", [
    ("n_kv", "the metadata key count is 1,152,921,504,606,846,976 before byte 24, more than the"),
    ("n_tensors", "the tensor count is 1,152,921,504,606,846,976"),
    ("array length", "an array's length is 1,099,511,627,776"),
    ("nested array", "an array of arrays"),
    ("duplicate key", "metadata key 'general.name' appears twice"),
    ("huge shape", "tensor 'token_embd.weight' has shape (576, 4611686018427387904), more than 2**63 - 1"),
    ("offset past end", "truncated GGUF file: tensor token_embd.weight ends at byte"),
    ("offset unaligned", "tensor 'token_embd.weight' starts at data offset 3, not a multiple of the alignment 32"),
    ("dimensions", "tensor 'token_embd.weight' has 5 dimensions (at most 4)"),
])
def test_header_counts_lengths_and_shapes_that_lie(tmp_path, smollm2_gguf, case, message):
    """Counts and lengths past the bytes left, nested arrays, repeated names, shapes past int64 and offsets
    past the end or off the alignment: a ModelLoadError naming the file, at once (no loop over 2**60 entries)."""
    path = _storage_lies(smollm2_gguf, tmp_path)[case]
    with pytest.raises(ModelLoadError, match=re.escape(message)) as caught:
        read_gguf_header(path)
    assert str(path) in str(caught.value)


def _venus_edge(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "import sys; from venus_edge.cli import main; sys.exit(main(sys.argv[1:]))", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)


@pytest.mark.parametrize("command", [["research", "q", "--n-ctx", "2048"], ["serve", "--port", "0"]])
def test_cli_refuses_a_lying_gguf_with_the_file_and_value(tmp_path, smollm2_gguf, docs_corpus, command):
    """The issue's case: ``block_count`` 1e9 made ``research --n-ctx 2048`` and ``serve`` exit 134 printing
    nothing (llama.cpp's assert). Now both exit 3 and say which file and value."""
    path = patched_value(smollm2_gguf, tmp_path / "layers.gguf", "llama.block_count", 1_000_000_000)
    done = _venus_edge(*command, "--model", str(path), "--corpus", str(docs_corpus))
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert str(path) in done.stderr and "llama.block_count is 1,000,000,000" in done.stderr, done.stderr[-2000:]


ABORTING_LOAD = """
import sys
from pathlib import Path
import llama_cpp
from llama_cpp import _internals
from venus_edge.engines.llama_load import llama_diagnostics
path = Path(sys.argv[1])
with llama_diagnostics(path):
    _internals.LlamaModel(path_model=str(path), params=llama_cpp.llama_model_default_params(), verbose=False)
"""


def test_llama_cpp_abort_message_reaches_stderr(tmp_path, smollm2_gguf):
    """A load that llama.cpp aborts (here past our header checks, straight into llama-cpp-python with
    verbose=False, which points fd 2 at /dev/null) still prints llama.cpp's assert and the file on stderr."""
    path = patched_value(smollm2_gguf, tmp_path / "layers.gguf", "llama.block_count", 1_000_000_000)
    done = subprocess.run([sys.executable, "-c", ABORTING_LOAD, str(path)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode != 0
    assert f"llama.cpp aborted while loading {path}" in done.stderr, done.stderr[-2000:]
    assert "GGML_ASSERT(hparams.n_layer_all > 0 && hparams.n_layer_all <= LLAMA_MAX_LAYERS) failed" in done.stderr


def test_llama_cpp_refusal_carries_its_own_error_lines(tmp_path, smollm2_gguf):
    """A file our reader accepts and llama.cpp refuses: the ModelLoadError holds llama.cpp's reason, not only
    llama-cpp-python's "Failed to load model from file"."""
    path, header = _copy(smollm2_gguf, tmp_path / "pre.gguf")
    at = _after_string(header, "tokenizer.ggml.pre") + 4 + 8  # type, string length, then 'smollm'
    _patch(path, at, b"smollx")
    read_model_header(path)
    with pytest.raises(ModelLoadError, match="unknown pre-tokenizer type: 'smollx'") as caught:
        LlamaCppEngine(path, n_ctx=512)
    assert str(path) in str(caught.value)
