"""The converter streams tensors by blocks of rows: same bytes as encoding each tensor whole, bounded memory.

The checkpoints here carry a small BPE tokenizer (`train_small_bpe`), so a conversion takes well under a second
apart from the tensor data.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors import safe_open

from venus_edge.quantize import convert as convert_module
from venus_edge.quantize.convert import convert_checkpoint
from venus_edge.quantize.errors import ConversionError
from venus_edge.quantize.qwen_tokenizer import train_small_bpe
from venus_edge.quantize.tiny import Qwen3Config, write_tiny_qwen3

SMALL = dataclasses.replace(
    Qwen3Config.tiny(), vocab_size=1000, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
    num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
)
TEXTS = [
    "def run(self):\n    return {'k': [1, 2, 3]}\n",
    "## Results\n1. **Top-1** = 98.5%\n",
    "café crème brûlée",
] * 20


@pytest.fixture(scope="module")
def small_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_small_bpe(TEXTS, tmp_path_factory.mktemp("bpe"), vocab_size=300)


def _load_whole(folder: Path, tensor) -> np.ndarray:
    """The converter's former whole-tensor read: float16 or float32, BF16 widened through an mmap."""
    if tensor.dtype != "BF16":
        with safe_open(folder / tensor.shard, framework="numpy") as reader:
            array = reader.get_tensor(tensor.name)
        return array if array.dtype in (np.float16, np.float32) else array.astype(np.float32)
    with gguf.utility.SafetensorsLocal(folder / tensor.shard) as local_tensors:
        words = local_tensors[tensor.name].mmap_bytes().view(np.uint16)
    return (words.astype(np.uint32) << 16).view(np.float32).reshape(tensor.shape)


def _write_tensors_whole(writer, folder, planned, chunk_bytes=None) -> None:
    """The converter's former tensor writer: each tensor encoded whole, written by `GGUFWriter.write_tensor_data`."""
    for item in planned:
        writer.write_tensor_data(gguf.quants.quantize(_load_whole(folder, item.source), item.qtype))


@pytest.mark.parametrize("source_dtype", ["bfloat16", "float32", "float16"])
def test_streamed_file_is_byte_identical_to_whole_tensor_encoding(source_dtype, small_tokenizer, tmp_path, monkeypatch):
    """Blocks of 1 row (100 B) and of 3 rows (1000 B, 1000 rows: a short last block); norms split in blocks too."""
    checkpoint = write_tiny_qwen3(
        tmp_path / "ckpt", config=SMALL, seed=3, dtype=source_dtype, tokenizer_dir=small_tokenizer
    )
    for out_type in ("f16", "bf16", "f32"):
        with monkeypatch.context() as patch:
            patch.setattr(convert_module, "_write_tensors", _write_tensors_whole)
            whole = convert_checkpoint(checkpoint, tmp_path / f"whole-{out_type}.gguf", out_type=out_type).read_bytes()
        for chunk_bytes in (100, 1000):
            monkeypatch.setattr(convert_module, "STREAM_CHUNK_BYTES", chunk_bytes)
            streamed = convert_checkpoint(checkpoint, tmp_path / "streamed.gguf", out_type=out_type).read_bytes()
            assert streamed == whole, f"{source_dtype} -> {out_type}, blocks of {chunk_bytes} B differ"


# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so a child would inherit this test process's peak.
_MEASURE = """
import json, sys
from venus_edge.quantize.convert import convert_checkpoint
import tokenizers  # imported by the converter's vocabulary step: part of the baseline, not of the tensors
def status_kib(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key + ":"))
before_kib = status_kib("VmRSS")
convert_checkpoint(sys.argv[1], sys.argv[2], out_type=sys.argv[3])
print(json.dumps({"before_kib": before_kib, "peak_kib": status_kib("VmHWM")}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmRSS from /proc")
def test_peak_rss_growth_is_far_below_the_embedding(small_tokenizer, tmp_path):
    """A 256 MiB (float32) embedding, BF16 on disk, to F16: the converter process grows by < 0.5x of it.

    Encoding the embedding whole would hold its float32 copy (256 MiB), its F16 encoding (128 MiB) and the
    mapped BF16 pages (128 MiB); streaming holds a few `STREAM_CHUNK_BYTES` buffers.
    """
    config = dataclasses.replace(SMALL, vocab_size=65536, hidden_size=1024, intermediate_size=256)
    checkpoint = write_tiny_qwen3(
        tmp_path / "ckpt", config=config, seed=0, dtype="bfloat16", tokenizer_dir=small_tokenizer
    )
    embedding_f32_bytes = config.vocab_size * config.hidden_size * 4
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(checkpoint), str(tmp_path / "out.gguf"), "f16"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    growth_bytes = (measured["peak_kib"] - measured["before_kib"]) * 1024
    assert growth_bytes < 0.5 * embedding_f32_bytes, (
        f"peak RSS grew by {growth_bytes / 2**20:.0f} MiB converting a {embedding_f32_bytes / 2**20:.0f} MiB embedding"
    )
    assert (tmp_path / "out.gguf").stat().st_size > embedding_f32_bytes // 2  # the F16 embedding was written


def test_truncated_shard_is_reported_before_writing(small_tokenizer, tmp_path):
    checkpoint = write_tiny_qwen3(tmp_path / "ckpt", config=SMALL, seed=0, tokenizer_dir=small_tokenizer)
    shard = checkpoint / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(
        ConversionError, match=r"model\.safetensors: tensor .* has data_offsets .* truncated or corrupt"
    ):
        convert_checkpoint(checkpoint, tmp_path / "out.gguf")
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*.partial"))


def test_integer_dtype_is_reported(small_tokenizer, tmp_path):
    from safetensors.numpy import load_file, save_file

    checkpoint = write_tiny_qwen3(tmp_path / "ckpt", config=SMALL, seed=0, tokenizer_dir=small_tokenizer)
    weights = load_file(checkpoint / "model.safetensors")
    weights["model.norm.weight"] = weights["model.norm.weight"].astype(np.int32)
    save_file(weights, checkpoint / "model.safetensors")
    with pytest.raises(
        ConversionError, match=r"tensor model\.norm\.weight has dtype I32; this converter reads F64, F32"
    ):
        convert_checkpoint(checkpoint, tmp_path / "out.gguf")
