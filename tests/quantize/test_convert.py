"""Tiny Qwen3 checkpoint -> GGUF: metadata, tensors, llama.cpp load and tokenization, and every bad input."""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from venus_edge.quantize import convert as convert_module
from venus_edge.quantize.convert import convert_checkpoint
from venus_edge.quantize.errors import (
    CheckpointNotFoundError,
    DiskFullError,
    MissingTensorError,
    OutputNotWritableError,
    TensorShapeError,
    TokenizerFilesMissingError,
    UnsupportedArchitectureError,
)
from venus_edge.quantize.gguf_info import ggml_type_name, inspect_gguf, read_gguf_header
from venus_edge.quantize.tiny import Qwen3Config, write_tiny_qwen3

MIXED_TEXTS = [
    "import os\n\nclass A:\n    def run(self):\n        return {'k': [1, 2, 3]}\n",
    "## Results\n\n1. **Top-1** = 98.5%\n2. `pip install venus-edge`\n> quote\n",
    "北京是中国的首都。東京は日本の首都です。서울은 한국의 수도입니다.",
    "ship it 🚀🔥 ok 👍🏽 👨‍👩‍👧",
    "café crème brûlée, naïve coöperation",
    "a" + " " * 50 + "b\n\n\n\n\t\t\t\tc" + "\n" * 7 + "   ",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    "<think>\nreason\n</think>\n\n<tool_call>\n{\"name\": \"search\"}\n</tool_call><|im_end|>",
]


def _tensor_bytes(path: Path) -> dict[str, bytes]:
    """GGUF tensor name -> raw data bytes, through our header reader and a plain file read."""
    header = read_gguf_header(path)
    data = path.read_bytes()
    return {
        t.name: data[header.data_offset + t.offset : header.data_offset + t.offset + t.n_bytes] for t in header.tensors
    }


def _variant(checkpoint: Path, tmp_path: Path, *, config_edit=None, drop: tuple[str, ...] = ()) -> Path:
    """A copy of the checkpoint folder (weights symlinked) with an edited config.json or files left out."""
    folder = tmp_path / "variant"
    folder.mkdir()
    for item in checkpoint.iterdir():
        if item.name not in drop:
            (folder / item.name).symlink_to(item)
    if config_edit is not None:
        config = json.loads((checkpoint / "config.json").read_text())
        config_edit(config)
        (folder / "config.json").unlink()
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def _assert_no_partial_files(folder: Path) -> None:
    leftovers = [p.name for p in folder.iterdir() if p.name.endswith((".gguf", ".partial"))]
    assert leftovers == [], f"files left behind: {leftovers}"


def test_f32_metadata_matches_config(tiny_gguf_f32, chatml_template):
    """Hyper-parameters, tokenizer facts and tensor types are those llama.cpp's converter writes for Qwen3."""
    info = inspect_gguf(tiny_gguf_f32)
    config = Qwen3Config.tiny()
    meta = info["metadata"]
    arch = "qwen3"
    assert info["architecture"] == arch and info["file_type"] == "ALL_F32"
    assert meta[gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)] == config.num_hidden_layers
    assert meta[gguf.Keys.LLM.EMBEDDING_LENGTH.format(arch=arch)] == config.hidden_size
    assert meta[gguf.Keys.LLM.FEED_FORWARD_LENGTH.format(arch=arch)] == config.intermediate_size
    assert meta[gguf.Keys.Attention.HEAD_COUNT_KV.format(arch=arch)] == config.num_key_value_heads
    assert meta[gguf.Keys.Attention.KEY_LENGTH.format(arch=arch)] == config.head_dim
    assert meta[gguf.Keys.Rope.FREQ_BASE.format(arch=arch)] == config.rope_theta
    assert meta[gguf.Keys.Tokenizer.CHAT_TEMPLATE] == chatml_template
    assert info["tokenizer"] == {
        "model": "gpt2",
        "pre": "qwen2",
        "n_tokens": 151936,
        "n_merges": 151387,
        "token_type_counts": {"NORMAL": 151643, "CONTROL": 20, "USER_DEFINED": 6, "UNUSED": 267},
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "padding_token_id": 151643,
        "add_bos_token": False,
        "has_chat_template": True,
    }
    # tied embeddings: no output tensor; 1-D norms F32; 2 layers x 11 + token_embd + output_norm
    assert info["n_tensors"] == 24 and info["tensor_types"] == {"F32": 24}


def test_f16_keeps_norms_f32_and_tensor_names(tiny_gguf_f16):
    header = read_gguf_header(tiny_gguf_f16)
    types = {t.name: ggml_type_name(t.ggml_type) for t in header.tensors}
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, 2)
    assert gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.OUTPUT] + ".weight" not in types
    assert types[name_map.get_name("model.layers.1.self_attn.q_norm.weight", try_suffixes=(".weight",))] == "F32"
    assert types[name_map.get_name("model.embed_tokens.weight", try_suffixes=(".weight",))] == "F16"
    assert sum(1 for t in types.values() if t == "F16") == 15 and sum(1 for t in types.values() if t == "F32") == 9


def test_f32_tensor_bytes_equal_checkpoint(tiny_checkpoint, tiny_gguf_f32):
    """Every F32 tensor is the checkpoint's bytes unchanged (numpy row-major = ggml order)."""
    weights = load_file(tiny_checkpoint / "model.safetensors")
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, 2)
    written = _tensor_bytes(tiny_gguf_f32)
    for hf_name, array in weights.items():
        gguf_name = name_map.get_name(hf_name, try_suffixes=(".weight",))
        assert written[gguf_name] == array.tobytes(), f"{hf_name} -> {gguf_name} differs"


def test_llama_cpp_loads_and_tokenizes_like_hf(tiny_gguf_f32, tiny_checkpoint):
    """llama.cpp's tokenization of code, markdown, CJK, emoji, NFC text, whitespace runs and ChatML = HF ids."""
    llm = llama_cpp.Llama(model_path=str(tiny_gguf_f32), n_ctx=256, verbose=False)
    hf = Tokenizer.from_file(str(tiny_checkpoint / "tokenizer.json"))
    for text in MIXED_TEXTS:
        ours = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        assert ours == hf.encode(text).ids, f"tokenization differs for {text[:40]!r}"
    assert llm.token_eos() == 151645
    assert llm.n_vocab() == 151936


def test_sharded_and_bf16_checkpoints(tiny_gguf_f32, tmp_path):
    """A 3-shard F32 checkpoint gives the same tensors; bf16 output stores 2-D weights as BF16."""
    sharded = write_tiny_qwen3(tmp_path / "sharded", seed=0, shards=3)
    assert (sharded / "model.safetensors.index.json").is_file()
    out = convert_checkpoint(sharded, tmp_path / "sharded.gguf", out_type="f32")
    assert _tensor_bytes(out) == _tensor_bytes(tiny_gguf_f32)
    bf16 = convert_checkpoint(sharded, tmp_path / "bf16.gguf", out_type="bf16")
    assert inspect_gguf(bf16)["tensor_types"] == {"BF16": 15, "F32": 9}


def test_unsupported_architecture(tiny_checkpoint, tmp_path):
    folder = _variant(tiny_checkpoint, tmp_path, config_edit=lambda c: c.update(architectures=["MambaForCausalLM"]))
    with pytest.raises(UnsupportedArchitectureError, match=r"MambaForCausalLM.*Qwen3ForCausalLM"):
        convert_checkpoint(folder, tmp_path / "out.gguf")
    _assert_no_partial_files(tmp_path)


def test_missing_and_extra_tensors(tiny_checkpoint, tmp_path):
    three_layers = _variant(tiny_checkpoint, tmp_path, config_edit=lambda c: c.update(num_hidden_layers=3))
    with pytest.raises(
        MissingTensorError,
        match=r"missing .*model\.layers\.2\.mlp\.down_proj\.weight \(expected in model\.safetensors\)",
    ):
        convert_checkpoint(three_layers, tmp_path / "out.gguf")
    shutil.rmtree(three_layers)
    one_layer = _variant(tiny_checkpoint, tmp_path, config_edit=lambda c: c.update(num_hidden_layers=1))
    with pytest.raises(
        MissingTensorError, match=r"unexpected .*model\.layers\.1\.self_attn\.q_proj\.weight \(in model\.safetensors\)"
    ):
        convert_checkpoint(one_layer, tmp_path / "out.gguf")
    _assert_no_partial_files(tmp_path)


def test_missing_shard_names_its_tensors(tmp_path):
    sharded = write_tiny_qwen3(tmp_path / "ckpt", seed=1, dtype="float16", shards=2)
    (sharded / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(
        MissingTensorError, match=r"model\.norm\.weight \(expected in model-00002-of-00002\.safetensors\)"
    ):
        convert_checkpoint(sharded, tmp_path / "out.gguf")
    _assert_no_partial_files(tmp_path)


def test_tensor_shape_mismatch(tiny_checkpoint, tmp_path):
    folder = _variant(tiny_checkpoint, tmp_path, config_edit=lambda c: c.update(intermediate_size=768))
    with pytest.raises(
        TensorShapeError,
        match=r"down_proj\.weight in model\.safetensors has shape \(256, 512\); config\.json implies \(256, 768\)",
    ):
        convert_checkpoint(folder, tmp_path / "out.gguf")
    _assert_no_partial_files(tmp_path)


def test_tokenizer_files_missing(tiny_checkpoint, tmp_path):
    folder = _variant(tiny_checkpoint, tmp_path, drop=("tokenizer.json",))
    with pytest.raises(TokenizerFilesMissingError, match=r"tokenizer\.json") as caught:
        convert_checkpoint(folder, tmp_path / "out.gguf")
    assert caught.value.missing == ("tokenizer.json",)
    _assert_no_partial_files(tmp_path)


@pytest.mark.parametrize("source", ["{tmp}/nope/deeper", "/nonexistent", "./missing", "../missing", "~/missing"])
def test_checkpoint_not_found(tmp_path, source):
    """A path that names no folder is "no such folder", never a hub lookup: ``/nonexistent`` has one slash, like
    ``owner/name``, and went to the hub's id check (HFValidationError)."""
    with pytest.raises(CheckpointNotFoundError, match="no such folder"):
        convert_checkpoint(source.format(tmp=tmp_path), tmp_path / "out.gguf")


def test_output_not_writable(tiny_checkpoint, tmp_path):
    with pytest.raises(OutputNotWritableError, match="does not exist"):
        convert_checkpoint(tiny_checkpoint, tmp_path / "missing-folder" / "out.gguf")
    with pytest.raises(OutputNotWritableError, match="is a folder"):
        convert_checkpoint(tiny_checkpoint, tmp_path)


def test_disk_full_enospc_removes_partial_file_and_keeps_old_output(tiny_checkpoint, tmp_path, monkeypatch):
    """ENOSPC on the third tensor write: DiskFullError, no temp file, and a previous output stays intact."""
    out = tmp_path / "out.gguf"
    out.write_bytes(b"previous")
    original_write = convert_module._write_tensor
    calls = []

    def write_until_full(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original_write(*args, **kwargs)

    monkeypatch.setattr(convert_module, "_write_tensor", write_until_full)
    with pytest.raises(DiskFullError, match=r"No space left on device.*partial file was removed"):
        convert_checkpoint(tiny_checkpoint, out, out_type="f16")
    assert out.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.gguf"]


def test_file_size_limit_is_reported_as_disk_full(tiny_checkpoint, tmp_path):
    """A real RLIMIT_FSIZE of 8 MB (SIGXFSZ ignored) stops the write; the error is DiskFullError."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8 * 2**20, hard))
    try:
        with pytest.raises(DiskFullError, match="needs about"):
            convert_checkpoint(tiny_checkpoint, tmp_path / "out.gguf", out_type="f16")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)
    _assert_no_partial_files(tmp_path)


def test_tiny_checkpoint_is_deterministic(tmp_path):
    first = write_tiny_qwen3(tmp_path / "a", config=Qwen3Config.tiny(), seed=7, dtype="float16")
    second = write_tiny_qwen3(tmp_path / "b", config=Qwen3Config.tiny(), seed=7, dtype="float16")
    assert (first / "model.safetensors").read_bytes() == (second / "model.safetensors").read_bytes()
    config = json.loads((first / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert config["tie_word_embeddings"] is True and config["head_dim"] == 64
    weights = load_file(first / "model.safetensors")
    assert "lm_head.weight" not in weights
    assert abs(float(np.std(weights["model.embed_tokens.weight"].astype(np.float32))) - 0.02) < 1e-3


def test_a_killed_runs_partial_file_is_removed_by_the_next_run(tiny_checkpoint, tmp_path):
    """SIGKILL leaves ``.NAME.PID.HEX.partial`` (as large as the output: GBs for a 4B model) that no run removed.
    The next run into the same file removes those whose process is gone, and never one of a running process."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    out = tmp_path / "out.gguf"
    from venus_edge.quantize.output import _HOST

    stale = tmp_path / f".out.gguf.{_HOST}-{int(dead.stdout)}.0a1b2c3d.partial"
    stale.write_bytes(b"\0" * 1024)
    live = tmp_path / f".out.gguf.{_HOST}-{os.getpid()}.0a1b2c3d.partial"  # this process: a run still writing
    live.write_bytes(b"\0" * 1024)
    other = tmp_path / f".other.gguf.{_HOST}-{int(dead.stdout)}.0a1b2c3d.partial"  # another output's
    other.write_bytes(b"\0" * 1024)
    elsewhere = tmp_path / f".out.gguf.another-machine-{int(dead.stdout)}.0a1b2c3d.partial"  # a PID of another host
    elsewhere.write_bytes(b"\0" * 1024)
    convert_checkpoint(tiny_checkpoint, out)
    assert out.is_file() and not stale.exists() and live.exists() and other.exists() and elsewhere.exists()
