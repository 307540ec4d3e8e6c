"""llama.cpp quantization of the tiny Qwen3 GGUF: every type, fallback reports, and bad inputs."""

from __future__ import annotations

import dataclasses

import gguf
import llama_cpp
import numpy as np
import pytest

from venus_edge.quantize.errors import GGUFReadError
from venus_edge.quantize.gguf_info import inspect_gguf, read_gguf_header
from venus_edge.quantize.quantize import quantize_gguf
from venus_edge.quantize.tiny import Qwen3Config, build_tiny_qwen3_gguf

EXPECTED_TYPES = {  # tiny Qwen3: 9 norms F32; tied token_embd is the output tensor (Q6_K, or Q8_0 for Q8_0)
    "Q8_0": {"F32": 9, "Q8_0": 15},
    "Q6_K": {"F32": 9, "Q6_K": 15},
    "Q5_K_M": {"F32": 9, "Q5_K": 12, "Q6_K": 3},
    "Q4_K_M": {"F32": 9, "Q4_K": 12, "Q6_K": 3},  # + layer 1 attn_v, ffn_down (use_more_bits)
    "Q4_0": {"F32": 9, "Q4_0": 14, "Q6_K": 1},
}


@pytest.mark.parametrize("qtype", list(EXPECTED_TYPES))
def test_each_type_without_fallbacks(tiny_gguf_f16, tmp_path, qtype):
    """Row lengths 256 and 512 fit every block size, so nothing falls back."""
    report = quantize_gguf(tiny_gguf_f16, tmp_path / f"{qtype}.gguf", qtype)
    assert report.tensor_types == EXPECTED_TYPES[qtype]
    assert report.fallbacks == ()
    assert report.out_size_bytes < report.in_size_bytes
    assert inspect_gguf(report.out_path)["tokenizer"]["n_tokens"] == 151936
    assert [p.name for p in tmp_path.iterdir()] == [f"{qtype}.gguf"]


def test_quantized_model_loads_and_generates(tiny_gguf_f16, tmp_path):
    report = quantize_gguf(tiny_gguf_f16, tmp_path / "q4km.gguf", "Q4_K_M")
    llm = llama_cpp.Llama(model_path=str(report.out_path), n_ctx=256, verbose=False)
    out = llm("Hello", max_tokens=4, temperature=0.0)
    assert out["usage"]["completion_tokens"] >= 1


def test_fallbacks_are_reported(tmp_path):
    """Hidden 320 is not a multiple of 256: k-quant rows fall back (Q4_K -> Q5_0) and the report lists them."""
    config = dataclasses.replace(Qwen3Config.tiny(), hidden_size=320, intermediate_size=640)
    f16 = build_tiny_qwen3_gguf(tmp_path / "work", "f16", config=config)
    report = quantize_gguf(f16, tmp_path / "q4km.gguf", "Q4_K_M")
    fallbacks = {f.tensor: (f.expected, f.actual) for f in report.fallbacks}
    assert fallbacks["blk.0.attn_q.weight"] == ("Q4_K", "Q5_0")
    assert fallbacks["token_embd.weight"] == ("Q4_K", "Q8_0")  # output tensor: Q6_K would not fit either
    assert "blk.0.attn_output.weight" not in fallbacks  # its rows are 256 long
    # llama.cpp's own 12 row-size fallbacks (its log) + the output tensor it moved to Q8_0 without counting
    assert len(report.fallbacks) == 13


def _truncated_copy(source, tmp_path, keep_bytes):
    path = tmp_path / "broken.gguf"
    with open(source, "rb") as file:
        path.write_bytes(file.read(keep_bytes))
    return path


@pytest.mark.parametrize("keep_bytes", [0, 100, 5_000_000, -1000], ids=["empty", "in-header", "in-data", "last-kb"])
def test_truncated_input_gives_clear_error_and_no_output(tiny_gguf_f16, tmp_path, keep_bytes):
    size = tiny_gguf_f16.stat().st_size
    broken = _truncated_copy(tiny_gguf_f16, tmp_path, keep_bytes % size if keep_bytes < 0 else keep_bytes)
    with pytest.raises(GGUFReadError, match=str(broken)):
        quantize_gguf(broken, tmp_path / "out.gguf", "Q8_0")
    with pytest.raises(GGUFReadError, match=r"broken\.gguf"):
        inspect_gguf(broken)
    assert not (tmp_path / "out.gguf").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["broken.gguf"]


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_bytes(b"this is not a model" * 10)
    with pytest.raises(GGUFReadError, match="not a GGUF file: magic is"):
        inspect_gguf(path)


def test_unknown_qtype(tiny_gguf_f16, tmp_path):
    with pytest.raises(ValueError, match="Q4_K_M"):
        quantize_gguf(tiny_gguf_f16, tmp_path / "x.gguf", "Q3_K_XL")


def test_header_reader_agrees_with_gguf_reader(tmp_path):
    """Our one-pass reader returns what gguf.GGUFReader returns (small file: GGUFReader is slow on vocabularies)."""
    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(path, arch="qwen3")
    writer.add_block_count(3)
    writer.add_rope_freq_base(1e6)
    writer.add_token_list(["a", "b", "<|im_end|>"])
    writer.add_token_types([1, 1, 3])
    writer.add_tensor("w", np.arange(64, dtype=np.float32).reshape(2, 32))
    writer.add_tensor("h", np.ones(48, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reference = gguf.GGUFReader(path)
    header = read_gguf_header(path)
    assert list(header.metadata[gguf.Keys.Tokenizer.LIST]) == reference.fields[gguf.Keys.Tokenizer.LIST].contents()
    assert header.metadata[gguf.Keys.LLM.BLOCK_COUNT.format(arch="qwen3")] == 3
    for ours, theirs in zip(header.tensors, reference.tensors, strict=True):
        assert (ours.name, ours.ggml_type, ours.n_bytes) == (theirs.name, theirs.tensor_type, theirs.n_bytes)
        assert header.data_offset + ours.offset == theirs.data_offset
