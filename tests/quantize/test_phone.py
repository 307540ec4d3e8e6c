"""`venus-edge quantize --target phone`: the master and the two types ARM builds repack, a quantized source
refused with the master's name, and each file's plan on the phone presets (real tiny Qwen3 files, real llama.cpp)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil

import pytest

from venus_edge.cli import main
from venus_edge.engines.base import GREEDY
from venus_edge.engines.llama_cpp import DEFAULT_HELPER_N_CTX, LlamaCppEngine
from venus_edge.errors import MemoryPlanError
from venus_edge.memory.devices import DEVICE_PRESETS, plan_on_device
from venus_edge.memory.header import read_model_header
from venus_edge.memory.presets import preset_model_header
from venus_edge.quantize.gguf_info import ggml_type_name, read_gguf_header
from venus_edge.quantize.phone import phone_memory_line

PHONES = [device for device in DEVICE_PRESETS.values() if device.kind == "phone"]


def _run(argv):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    return code, stdout.getvalue(), stderr.getvalue()


def _snapshot(folder):
    """Every file under `folder` with its size and mtime (None when the folder does not exist)."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def phone_run(tiny_checkpoint, tmp_path_factory):
    """One `venus-edge quantize CHECKPOINT --target phone` run: (exit code, stdout, stderr, out folder)."""
    out_dir = tmp_path_factory.mktemp("phone") / "out"
    code, stdout, stderr = _run(["quantize", str(tiny_checkpoint), "--target", "phone", "--out", str(out_dir),
                                 "--n-ctx", "32", "--agentic-tokens", "2"])
    return code, stdout, stderr, out_dir


def test_phone_profile_writes_the_master_q4_0_and_q8_0(phone_run):
    code, stdout, stderr, out_dir = phone_run
    assert code == 0, stderr
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["checkpoint-Q4_0.gguf", "checkpoint-Q8_0.gguf", "checkpoint-f16.gguf", "table.json", "table.md"]
    assert "[1/5] convert" in stderr and "no fallbacks" in stderr
    table = json.loads((out_dir / "table.json").read_text())
    rows = {row["file_type"]: row for row in table["rows"]}
    assert set(rows) == {"F16", "Q4_0", "Q8_0"}
    assert 0 < rows["Q8_0"]["mean_kl"] < rows["Q4_0"]["mean_kl"], table
    assert rows["Q4_0"]["fallbacks"] == [] and rows["Q4_0"]["agentic_total"] == 4
    for qtype, tensor_type in (("Q4_0", "Q4_0"), ("Q8_0", "Q8_0")):
        types = {ggml_type_name(t.ggml_type) for t in read_gguf_header(out_dir / f"checkpoint-{qtype}.gguf").tensors}
        assert tensor_type in types and types <= {tensor_type, "F32", "Q6_K"}, (qtype, types)
    master_types = {ggml_type_name(t.ggml_type) for t in read_gguf_header(out_dir / "checkpoint-f16.gguf").tensors}
    assert master_types == {"F16", "F32"}
    assert f"master (keep it: every later quant comes from it, never from a quant): {out_dir / 'checkpoint-f16.gguf'}" \
        in stdout


def test_phone_q4_0_loads_and_generates(phone_run, real_model_run):
    with LlamaCppEngine(phone_run[3] / "checkpoint-Q4_0.gguf", n_ctx=256, **real_model_run.engine_args()) as engine:
        assert engine.model_info()["file_type"] == "Q4_0"
        completion = engine.generate(engine.tokenize("<|im_start|>user\nHello<|im_end|>\n"),
                                     sampling=dataclasses.replace(GREEDY, max_tokens=5))
    assert completion.finish_reason in ("eog", "length") and completion.stats.tokens_decoded >= 1


def test_phone_memory_lines_agree_with_plan_on_device(phone_run):
    stdout, out_dir = phone_run[1], phone_run[3]
    lines = {line.split(":")[0].strip(): line for line in stdout.splitlines() if line.startswith("  checkpoint-")}
    assert set(lines) == {"checkpoint-f16.gguf", "checkpoint-Q4_0.gguf", "checkpoint-Q8_0.gguf"}, stdout
    for name, line in lines.items():
        header = read_model_header(out_dir / name)
        for device in PHONES:
            plan = plan_on_device(header, device, helper_n_ctx=DEFAULT_HELPER_N_CTX)
            assert f"{device.name} fits: n_ctx {plan.n_ctx:,}, {plan.kv_type} KV cache" in line, (device.name, line)


def test_memory_line_says_no_plan_where_the_planner_refuses():
    """DR-Venus-4B at F16 (8 GB of weights) pages on the small phones: the line says so with the planner's figure."""
    header = preset_model_header("DR-Venus-4B", "F16")
    line = phone_memory_line("DR-Venus-4B-F16.gguf", header, helper_n_ctx=DEFAULT_HELPER_N_CTX)
    refused = 0
    for device in PHONES:
        try:
            plan = plan_on_device(header, device, helper_n_ctx=DEFAULT_HELPER_N_CTX)
        except MemoryPlanError:
            refused += 1
            assert f"{device.name} no plan (needs " in line, line
        else:
            assert f"{device.name} fits: n_ctx {plan.n_ctx:,}" in line, line
    assert refused >= 1 and "phone-4gb no plan" in line


@pytest.mark.parametrize("out_exists", [True, False])
def test_quantized_source_is_refused_naming_the_master(phone_run, tmp_path, out_exists):
    source_dir = phone_run[3]
    out_dir = tmp_path / "out"
    if out_exists:
        out_dir.mkdir()
        (out_dir / "keep.txt").write_text("mine")
    before, source_before = _snapshot(out_dir), _snapshot(source_dir)
    code, stdout, stderr = _run(["quantize", str(source_dir / "checkpoint-Q4_0.gguf"), "--target", "phone",
                                 "--out", str(out_dir)])
    assert code == 3 and stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("error: ")
    assert "checkpoint-Q4_0.gguf is already quantized (Q4_0)" in stderr
    assert f"the master beside it instead: {source_dir / 'checkpoint-f16.gguf'}" in stderr
    assert _snapshot(out_dir) == before and _snapshot(source_dir) == source_before


def test_quantized_source_without_master_says_to_convert(phone_run, tmp_path):
    lonely = tmp_path / "alone" / "checkpoint-Q8_0.gguf"
    lonely.parent.mkdir()
    shutil.copyfile(phone_run[3] / "checkpoint-Q8_0.gguf", lonely)
    code, _, stderr = _run(["quantize", str(lonely), "--out", str(tmp_path / "out")])
    assert code == 3 and "is already quantized (Q8_0)" in stderr
    assert "no F16/BF16/F32 GGUF lies beside it; convert from the checkpoint instead" in stderr
    assert not (tmp_path / "out").exists() and sorted(p.name for p in lonely.parent.iterdir()) == [lonely.name]


def test_conflicting_types_are_a_usage_error(tiny_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["quantize", str(tiny_checkpoint), "--target", "phone", "--types", "Q4_K_M", "--out",
              str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--target phone writes Q4_0 and Q8_0" in err and "'Q4_K_M'" in err
    assert not (tmp_path / "out").exists()


def test_gguf_master_as_source(tiny_gguf_f16, tmp_path):
    """An F16 GGUF source is the base, used where it lies: only the quants and the table are written."""
    out_dir = tmp_path / "out"
    code, stdout, stderr = _run(["quantize", str(tiny_gguf_f16), "--target", "phone", "--out", str(out_dir),
                                 "--n-ctx", "32", "--agentic-tokens", "0"])
    assert code == 0, stderr
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["table.json", "table.md", "tiny-qwen3-Q4_0.gguf", "tiny-qwen3-Q8_0.gguf"]
    assert "[1/4] quantize -> tiny-qwen3-Q4_0.gguf" in stderr
    rows = json.loads((out_dir / "table.json").read_text())["rows"]
    assert [(row["file"], row["file_type"]) for row in rows] == [
        ("tiny-qwen3-f16.gguf", "F16"), ("tiny-qwen3-Q4_0.gguf", "Q4_0"), ("tiny-qwen3-Q8_0.gguf", "Q8_0")]
    assert f"master (keep it: every later quant comes from it, never from a quant): {tiny_gguf_f16}" in stdout
    assert "  tiny-qwen3-f16.gguf: phone-4gb fits" in stdout


def test_cli_names_the_phone_types_of_the_phone_module():
    """The CLI keeps its own copy (it registers without importing gguf); the two must agree."""
    from venus_edge.quantize import cli, phone

    assert cli._PHONE_TYPES == phone.PHONE_TYPES
