"""Checkpoints that lie (issue 25, kind 4): a config.json whose sizes are absurd or of the wrong type, and
safetensors headers nested 100k deep, with infinite, negative or huge shapes, offsets past the end or a header
length larger than the file. Each is a ``ConversionError`` naming the file and the value, raised before anything
loops over the value or allocates for it; ``venus-edge quantize`` prints it in one line and exits 3."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from venus_edge.cli import main
from venus_edge.quantize.convert import convert_checkpoint
from venus_edge.quantize.errors import ConversionError, MissingTensorError, TensorShapeError


def _variant(checkpoint: Path, tmp_path: Path, **config: object) -> Path:
    """A copy of the checkpoint (files symlinked) whose config.json has ``config`` set (None: the key removed)."""
    folder = tmp_path / "variant"
    folder.mkdir()
    for item in checkpoint.iterdir():
        if item.name != "config.json":
            (folder / item.name).symlink_to(item)
    values = json.loads((checkpoint / "config.json").read_text())
    values.update(config)
    values = {key: value for key, value in values.items() if value is not None}
    (folder / "config.json").write_text(json.dumps(values))  # float("inf") is written as Infinity
    return folder


@pytest.mark.parametrize("config, message", [
    ({"num_hidden_layers": 1_000_000_000}, "num_hidden_layers is 1,000,000,000; it must be an integer in [1, 512]"),
    ({"hidden_size": 10**12}, "hidden_size is 1,000,000,000,000"),
    ({"vocab_size": 10**9}, "vocab_size is 1,000,000,000"),
    ({"intermediate_size": -5}, "intermediate_size is -5"),
    ({"num_attention_heads": 0}, "num_attention_heads is 0"),
    ({"num_key_value_heads": "2"}, "num_key_value_heads is '2'"),
    ({"head_dim": 64.5}, "head_dim is 64.5"),
    ({"max_position_embeddings": float("inf")}, "max_position_embeddings is inf"),
    ({"num_hidden_layers": True}, "num_hidden_layers is True"),
    ({"hidden_size": None}, "hidden_size is None"),
    # floats llama.cpp asserts on: a NaN eps aborted two verify threads and the process never exited
    ({"rms_norm_eps": float("nan")}, "rms_norm_eps is nan; it must be a number in [0, 1]"),
    ({"rms_norm_eps": -1e-6}, "rms_norm_eps is -1e-06"),
    ({"rms_norm_eps": 1e300}, "rms_norm_eps is 1e+300"),
    ({"rms_norm_eps": "abc"}, "rms_norm_eps is 'abc'"),
    ({"rms_norm_eps": None}, "rms_norm_eps is None"),
    ({"rope_theta": -5.0}, "rope_theta is -5.0"),
    ({"rope_theta": "big"}, "rope_theta is 'big'"),
    ({"rope_parameters": [1]}, "rope_parameters is [1]; it must be an object"),
    ({"rope_parameters": {"rope_theta": float("inf")}}, "rope_theta is inf"),
    ({"architectures": 5}, "architectures is 5; it must be a list of names"),
])
def test_config_sizes_out_of_bounds_or_of_the_wrong_type(tiny_checkpoint, tmp_path, config, message):
    """The issue's case (1e9 layers allocated until memory ran out) and its siblings: refused at once with the
    config file's path and the value."""
    folder = _variant(tiny_checkpoint, tmp_path, **config)
    with pytest.raises(ConversionError, match=re.escape(message)) as caught:
        convert_checkpoint(folder, tmp_path / "out.gguf")
    assert str(folder / "config.json") in str(caught.value)
    assert not (tmp_path / "out.gguf").exists()


@pytest.mark.parametrize("content", [b"[1, 2]", b'{"a": "caf\xe9"}', b"", None], ids=["list", "latin-1", "empty",
                                                                                 "folder"])
def test_a_config_file_that_is_no_json_object_is_named(tiny_checkpoint, tmp_path, content):
    folder = _variant(tiny_checkpoint, tmp_path)
    (folder / "config.json").unlink()
    if content is None:
        (folder / "config.json").mkdir()
    else:
        (folder / "config.json").write_bytes(content)
    with pytest.raises(ConversionError, match=re.escape(str(folder / "config.json"))):
        convert_checkpoint(folder, tmp_path / "out.gguf")


def test_config_sizes_within_bounds_are_checked_against_the_tensors(tiny_checkpoint, tmp_path):
    """A vocabulary within bounds but not the checkpoint's: the embedding's shape says so before the vocabulary
    (vocab_size entries) is built."""
    folder = _variant(tiny_checkpoint, tmp_path, vocab_size=16_000_000)
    with pytest.raises(TensorShapeError, match=r"embed_tokens\.weight .*has shape \(151936, 256\)"):
        convert_checkpoint(folder, tmp_path / "out.gguf")
    more_layers = tmp_path / "more"
    more_layers.mkdir()
    with pytest.raises(MissingTensorError, match=r"model\.layers\.511\.mlp\.down_proj\.weight"):
        convert_checkpoint(_variant(tiny_checkpoint, more_layers, num_hidden_layers=512), tmp_path / "out.gguf")


def _safetensors(path: Path, header: bytes | str, data: bytes = b"", *, header_length: int | None = None) -> Path:
    raw = header.encode() if isinstance(header, str) else header
    path.write_bytes(struct.pack("<Q", len(raw) if header_length is None else header_length) + raw + data)
    return path


def _checkpoint_with(tiny_checkpoint: Path, tmp_path: Path, weights: Path) -> Path:
    """The tiny checkpoint's config and tokenizer with ``weights`` as its one safetensors file."""
    folder = tmp_path / "lying"
    folder.mkdir()
    for item in tiny_checkpoint.iterdir():
        if not item.name.endswith(".safetensors") and not item.name.endswith(".index.json"):
            (folder / item.name).symlink_to(item)
    weights.rename(folder / "model.safetensors")
    return folder


def _entry(shape: object, offsets: object = (0, 16), dtype: str = "F32") -> str:
    return json.dumps({"model.norm.weight": {"dtype": dtype, "shape": shape, "data_offsets": offsets}})


@pytest.mark.parametrize("case, header, message", [
    ("nested", "[" * 100_000 + "]" * 100_000, "header is JSON nested too deep"),
    ("nested object", '{"a":' * 100_000 + "1" + "}" * 100_000, "header is JSON nested too deep"),
    ("infinite shape", _entry([float("inf"), 4]), "header entry of model.norm.weight is"),
    ("negative shape", _entry([-4, -1]), "header entry of model.norm.weight is"),
    ("float shape", _entry([2.5]), "header entry of model.norm.weight is"),
    ("huge shape", _entry([1 << 62, 1 << 62]), "shape (4611686018427387904, 4611686018427387904)"),
    ("offsets past the end", _entry([4], [1 << 40, (1 << 40) + 16]), "data_offsets [1099511627776, 1099511627792]"),
    ("offsets reversed", _entry([4], [16, 0]), "has data_offsets [16, 0]"),
    ("entry not an object", json.dumps({"model.norm.weight": [1, 2]}), "header entry of model.norm.weight is [1, 2]"),
    ("header not an object", "[1, 2, 3]", "header is not a JSON object"),
    ("not JSON", b"\xff\xfe{", "header is not valid JSON"),
    ("overlapping offsets", json.dumps({"model.norm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                        "model.other.weight": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}),
     "tensors model.norm.weight and model.other.weight share bytes"),  # the norm was written from other bytes
])
def test_safetensors_headers_that_lie(tiny_checkpoint, tmp_path, case, header, message):
    """A ConversionError naming the shard, never a RecursionError, OverflowError or an allocation."""
    weights = _safetensors(tmp_path / "weights.safetensors", header, np.zeros(4, np.float32).tobytes())
    folder = _checkpoint_with(tiny_checkpoint, tmp_path, weights)
    with pytest.raises(ConversionError, match=re.escape(message)) as caught:
        convert_checkpoint(folder, tmp_path / "out.gguf")
    assert str(folder / "model.safetensors") in str(caught.value)


@pytest.mark.parametrize("shard", ["../../elsewhere/model.safetensors", "/etc/model.safetensors", ["model.safetensors"],
                                   "model.bin", 5])
def test_an_index_that_names_a_shard_outside_the_folder_or_no_file_name(tiny_checkpoint, tmp_path, shard):
    """A weight_map entry ``../../x/model.safetensors`` made the converter read a file outside the checkpoint; a list
    was a TypeError (unhashable)."""
    folder = _variant(tiny_checkpoint, tmp_path)
    (folder / "model.safetensors.index.json").unlink(missing_ok=True)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"model.norm.weight": shard}}))
    with pytest.raises(ConversionError, match=r"a shard is the name of a \.safetensors file in the checkpoint"):
        convert_checkpoint(folder, tmp_path / "out.gguf")


def test_safetensors_header_length_larger_than_the_file(tiny_checkpoint, tmp_path):
    weights = _safetensors(tmp_path / "weights.safetensors", _entry([4]), header_length=1 << 50)
    folder = _checkpoint_with(tiny_checkpoint, tmp_path, weights)
    with pytest.raises(ConversionError, match=r"header length is 1125899906842624 bytes; the file has \d+"):
        convert_checkpoint(folder, tmp_path / "out.gguf")


def test_cli_prints_one_line_for_a_lying_checkpoint(tiny_checkpoint, tmp_path, capsys):
    """``venus-edge quantize`` on the 1e9-layer config: exit 3, one ``error:`` line naming the file, no
    traceback, no output folder content."""
    folder = _variant(tiny_checkpoint, tmp_path, num_hidden_layers=1_000_000_000)
    assert main(["quantize", str(folder), "--out", str(tmp_path / "out"), "--quiet"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(folder / "config.json") in err and "Traceback" not in err, err
    assert not list((tmp_path / "out").glob("*.gguf")) if (tmp_path / "out").exists() else True


@pytest.mark.parametrize("name, content", [
    ("tokenizer.json", b"garbage"), ("tokenizer.json", b""), ("tokenizer.json", b'{"model": {"vocab": '),
    ("tokenizer.json", b"\xff\xfe{}"), ("tokenizer.json", b'{"version": "1.0", "pre_tokenizer": [1]}'),
    ("tokenizer_config.json", b"garbage"), ("tokenizer_config.json", b"[1]"), ("tokenizer_config.json", b"\xe9"),
])
def test_tokenizer_files_that_are_not_what_they_say_are_named(tiny_checkpoint, tmp_path, name, content):
    """A garbage, truncated or non-UTF-8 tokenizer file was a traceback from the tokenizers library (a bare
    Exception) or from gguf's SpecialVocab."""
    folder = _variant(tiny_checkpoint, tmp_path)
    (folder / name).unlink()
    (folder / name).write_bytes(content)
    with pytest.raises(ConversionError, match=re.escape(str(folder / name))):
        convert_checkpoint(folder, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()
