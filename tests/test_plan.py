"""The memory planner (``venus_edge.memory``): the GGUF header reader against llama.cpp's own reading, the KV and
compute sizes against what llama.cpp allocates, the choice rule, the refusal, the engine and the ``plan`` command."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import struct
from pathlib import Path

import llama_cpp
import pytest
from llama_cpp import _internals

from venus_edge.cli import main
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.errors import MemoryPlanError, ModelLoadError
from venus_edge.memory import (
    MemoryPlan,
    available_ram_bytes,
    dr_venus_4b_header,
    estimate_memory,
    kv_bytes_per_token,
    parse_size,
    plan_memory,
    presets_table,
    read_model_header,
)
from venus_edge.memory.machine import busy_cores, check_threads_fit, physical_cores, threads_that_fit

GiB = 1 << 30
MiB = 1 << 20
NO_REPACK: frozenset[str] = frozenset()
README = Path(__file__).resolve().parents[1] / "README.md"


def dr_venus(quant_bits: float = 4.89, file_type: str = "Q4_K_M"):
    return dr_venus_4b_header(file_type, quant_bits)


def plan(header, ram_gib: float, **kwargs) -> MemoryPlan:
    return plan_memory(header, ram_bytes=int(ram_gib * GiB), n_threads=2, cpu_features=NO_REPACK, **kwargs)


# ---------------------------------------------------------------------------------------------- header


def _llama_facts(path: Path) -> dict:
    """What llama.cpp itself reads from the file (a full load: the weights are mapped, not copied)."""
    model = _internals.LlamaModel(path_model=str(path), params=llama_cpp.llama_model_default_params(), verbose=False)
    try:
        handle = model.model
        return {
            "n_layer": llama_cpp.llama_model_n_layer(handle), "n_head": llama_cpp.llama_model_n_head(handle),
            "n_head_kv": llama_cpp.llama_model_n_head_kv(handle), "n_embd": model.n_embd(),
            "n_vocab": model.n_vocab(), "n_ctx_train": model.n_ctx_train(), "weight_bytes": model.size(),
            "n_params": model.n_params(), "metadata": model.metadata(),
        }
    finally:
        model.close()


@pytest.mark.parametrize("fixture", ["smollm2_gguf", "tiny_qwen3_gguf"])
def test_header_matches_llama_cpp(fixture, request):
    """Our stdlib reader gives the dimensions, vocabulary, training context, parameter count and tensor bytes
    that llama.cpp reads from the same file."""
    path = request.getfixturevalue(fixture)
    header, facts = read_model_header(path), _llama_facts(path)
    ours = {key: getattr(header, key) for key in ("n_layer", "n_head", "n_head_kv", "n_embd", "n_vocab",
                                                  "n_ctx_train", "weight_bytes", "n_params")}
    assert ours == {key: facts[key] for key in ours}, (ours, facts)
    meta = facts["metadata"]
    arch = meta["general.architecture"]
    assert header.architecture == arch
    head_dim = int(meta.get(f"{arch}.attention.key_length", facts["n_embd"] // facts["n_head"]))
    assert (header.head_dim_k, header.head_dim_v) == (head_dim, head_dim)
    assert header.n_ff == int(meta[f"{arch}.feed_forward_length"])


def test_header_facts_of_smollm2(smollm2_gguf):
    header = read_model_header(smollm2_gguf)
    assert (header.architecture, header.file_type, header.head_dim_k, header.n_ctx_train) == ("llama", "Q4_1", 64, 8192)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _corrupt_files(tmp_path: Path, source: Path) -> dict[str, Path]:
    data = source.read_bytes()
    key_length_at = 24  # magic, version, n_tensors, n_kv: the first key's length follows
    huge_key = data[:key_length_at] + struct.pack("<Q", 1 << 40) + data[key_length_at + 8:]
    bad_type_at = 24 + 8 + struct.unpack_from("<Q", data, 24)[0]  # the first value's type id
    bad_type = data[:bad_type_at] + struct.pack("<I", 99) + data[bad_type_at + 4:]
    return {
        "empty": _write(tmp_path / "empty.gguf", b""),
        "html": _write(tmp_path / "page.gguf", b"<html>404 Not Found</html>"),
        "version": _write(tmp_path / "v9.gguf", b"GGUF" + struct.pack("<I", 9) + data[8:4096]),
        "header cut": _write(tmp_path / "cut-header.gguf", data[:2_000]),
        "data cut": _write(tmp_path / "cut-data.gguf", data[:5_000_000]),
        "key length": _write(tmp_path / "key-length.gguf", huge_key[:1_000_000]),
        "value type": _write(tmp_path / "value-type.gguf", bad_type[:1_000_000]),
    }


@pytest.mark.parametrize("case, message", [
    ("empty", "empty"), ("html", "not a GGUF file"), ("version", "version 9"), ("header cut", "truncated GGUF header"),
    ("data cut", "truncated GGUF file: tensor"), ("key length", "truncated GGUF header"),
    ("value type", "unknown value type 99"),
])
def test_bad_files_raise_model_load_error_with_the_path(tmp_path, smollm2_gguf, case, message):
    path = _corrupt_files(tmp_path, smollm2_gguf)[case]
    with pytest.raises(ModelLoadError, match=message) as caught:
        read_model_header(path)
    assert str(path) in str(caught.value)


# ---------------------------------------------------------------------------------------------- sizes


def test_kv_bytes_per_token_of_dr_venus_4b():
    """36 layers x 8 KV heads x head dim 128, K and V: 144 KiB per token in f16 (PROTOCOL.md); q8_0 stores 34
    bytes per 32 elements, q4_0 18."""
    header = dr_venus()
    assert kv_bytes_per_token(header, "f16") == 144 * 1024 == 36 * 2 * 8 * 128 * 2
    assert kv_bytes_per_token(header, "q8_0") == 36 * 2 * (8 * 128 // 32) * 34
    assert kv_bytes_per_token(header, "q4_0") == 36 * 2 * (8 * 128 // 32) * 18
    assert estimate_memory(header, n_ctx=65_536, n_threads=1, cpu_features=NO_REPACK).kv_bytes == 9 * GiB


def _llama_buffers(path: Path, capfd, **settings) -> dict[str, float]:
    """llama.cpp's own "KV buffer size" and "compute buffer size" lines (MiB) for a context with ``settings``."""
    capfd.readouterr()
    llm = llama_cpp.Llama(model_path=str(path), n_threads=1, verbose=True, **settings)
    llm.close()
    log = capfd.readouterr().err
    sizes = {kind: float(re.findall(rf"CPU {kind} buffer size =\s+([\d.]+) MiB", log)[-1])
             for kind in ("KV", "compute")}
    sizes["n_ctx"] = int(re.findall(r"llama_context: n_ctx\s+= (\d+)", log)[-1])
    return sizes


@pytest.mark.parametrize("n_ctx, kv_type, flash_attn, n_ubatch", [
    (4096, "f16", False, 512), (2000, "q8_0", True, 512), (3000, "q4_0", True, 128), (8192, "f16", False, 256),
])
def test_kv_and_compute_sizes_match_what_llama_cpp_allocates(smollm2_gguf, capfd, n_ctx, kv_type, flash_attn, n_ubatch):
    """The KV cache to the byte (n_ctx rounded up to 256 cells, as llama.cpp does); the reserved compute buffer
    within 2 %."""
    estimate = estimate_memory(read_model_header(smollm2_gguf), n_ctx=n_ctx, kv_type=kv_type, flash_attn=flash_attn,
                               n_ubatch=n_ubatch, n_threads=1, cpu_features=NO_REPACK)
    types = {"f16": 1, "q8_0": 8, "q4_0": 2}
    llama = _llama_buffers(smollm2_gguf, capfd, n_ctx=n_ctx, n_batch=512, n_ubatch=n_ubatch, flash_attn=flash_attn,
                           type_k=types[kv_type], type_v=types[kv_type])
    assert llama["n_ctx"] == -(-n_ctx // 256) * 256
    assert round(estimate.kv_bytes / MiB, 2) == llama["KV"]
    assert estimate.compute_reserved_bytes / MiB == pytest.approx(llama["compute"], rel=0.02), (estimate, llama)


@pytest.mark.parametrize("text, expected", [
    ("6G", 6 * GiB), ("6GiB", 6 * GiB), ("512M", 512 * MiB), ("512 mib", 512 * MiB), ("6.5GB", 6_500_000_000),
    ("2048", 2048), ("1.5g", 3 * GiB // 2),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "6Q", "-1G", "0", "six gigs"])
def test_parse_size_refuses_nonsense(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_available_ram_is_at_most_the_machine():
    total = int(re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text()).group(1)) * 1024
    assert 0 < available_ram_bytes() <= total


# ---------------------------------------------------------------------------------------------- the choice


def test_a_machine_with_room_gets_the_old_default():
    """Enough RAM: min(n_ctx_train, 32768) with an f16 cache and no flash attention, as before the planner."""
    chosen = plan(dr_venus(), 64)
    assert (chosen.n_ctx, chosen.kv_type, chosen.flash_attn) == (32_768, "f16", False)
    assert plan(dataclasses.replace(dr_venus(), n_ctx_train=8192), 64).n_ctx == 8192


def test_plans_fit_and_are_the_largest_window_that_does():
    """For budgets from 3 to 16 GiB: the plan fits, and no KV type fits a window 1,024 tokens larger, except
    q4_0 when the rule passed it over (q8_0 chosen with at least 16K)."""
    header = dr_venus()
    for ram_gib in (3, 3.5, 4, 5, 6, 7, 8, 10, 12, 16):
        chosen = plan(header, ram_gib)
        assert chosen.fits and chosen.total_bytes <= chosen.usable_bytes
        assert chosen.flash_attn or chosen.kv_type == "f16"
        if chosen.n_ctx == 32_768:
            continue
        larger = [kind for kind in ("f16", "q8_0", "q4_0") if _fits(header, ram_gib, chosen.n_ctx + 1024, kind)]
        allowed = ["q4_0"] if chosen.kv_type == "q8_0" and chosen.n_ctx >= 16_384 else []
        assert larger in ([], allowed), (ram_gib, chosen.kv_type, chosen.n_ctx, larger)


def _fits(header, ram_gib: float, n_ctx: int, kind: str) -> bool:
    try:
        plan(header, ram_gib, n_ctx=n_ctx, kv_type=kind)
    except MemoryPlanError:
        return False
    return True


def test_q8_0_is_preferred_to_a_slightly_longer_q4_0_window():
    """6 GiB for the Q4_K_M with visit's helper context: q8_0 reaches about 26K, q4_0 32K; q8_0 wins."""
    chosen = plan(dr_venus(), 6, helper_n_ctx=8192)
    assert chosen.kv_type == "q8_0" and 16_384 <= chosen.n_ctx < 32_768, chosen


def test_fixed_settings_are_kept():
    header = dr_venus()
    chosen = plan(header, 8, kv_type="q4_0")
    assert (chosen.kv_type, chosen.flash_attn, chosen.n_ctx) == ("q4_0", True, 32_768)
    assert plan(header, 8, n_ctx=12_000).n_ctx == 12_000
    assert plan(header, 64, n_ctx=65_536).kv_type == "f16"
    with pytest.raises(ValueError, match="needs flash attention"):
        plan(header, 8, kv_type="q8_0", flash_attn=False)


def test_refusal_when_even_the_weights_do_not_fit():
    """The message names the weights' size, the budget and what would fit; both suggestions really fit."""
    header = dr_venus(8.5, "Q8_0")
    with pytest.raises(MemoryPlanError) as caught:
        plan(header, 4)
    message = str(caught.value)
    assert re.search(r"needs 4\.0 GiB for the weights alone \(4\.\d GiB with the process\) with 4\.0 GiB given "
                     r"\(3\.4 GiB usable after 15% headroom\); a (Q\w+) of this model or --ram ([\d.]+)G would fit",
                     message), message
    quant, ram = re.search(r"a (\w+) of this model or --ram ([\d.]+)G", message).groups()
    assert plan(header, float(ram)).fits
    bits = {"Q6_K": 6.56, "Q5_K_M": 5.69, "Q4_K_M": 4.89, "Q3_K_M": 3.91, "Q2_K": 3.0}[quant]
    assert plan(dr_venus(bits, quant), 4).fits
    assert caught.value.needed_bytes > caught.value.usable_bytes == int(4 * GiB * 0.85)


def test_refusal_of_a_fixed_window_names_the_window_that_fits():
    with pytest.raises(MemoryPlanError, match=r"--n-ctx (\d+) \(f16 KV cache\)") as caught:
        plan(dr_venus(), 8, n_ctx=131_072, kv_type="f16")
    window = int(re.search(r"--n-ctx (\d+)", str(caught.value)).group(1))
    assert plan(dr_venus(), 8, n_ctx=window, kv_type="f16").fits


def test_readme_presets_table_is_the_planners():
    """README's DR-Venus-4B presets are generated by ``presets_table``; regenerate them when the planner changes."""
    assert presets_table() in README.read_text()


# ---------------------------------------------------------------------------------------------- engine, CLI


def test_engine_loads_the_plan(smollm2_gguf):
    """A quantized KV cache reaches llama.cpp as type_k/type_v with flash attention; the plan is in model_info."""
    with LlamaCppEngine(smollm2_gguf, n_ctx=1000, kv_type="q8_0", n_threads=1) as engine:
        params = engine._llm.context_params
        assert (params.type_k, params.type_v, params.flash_attn_type) == (8, 8, llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED)
        info = engine.model_info()
        assert (info["n_ctx"], info["kv_type"], info["memory_plan"]["n_ctx"]) == (1000, "q8_0", 1000)
        assert engine.memory_plan.kv_bytes == kv_bytes_per_token(read_model_header(smollm2_gguf), "q8_0") * 1024


def test_engine_refuses_a_budget_too_small(smollm2_gguf):
    with pytest.raises(MemoryPlanError, match=r"needs .* with 100\.0 MiB given"):
        LlamaCppEngine(smollm2_gguf, ram_bytes=100 * MiB)
    with pytest.raises(ValueError, match="kv_cache_f32"):
        LlamaCppEngine(smollm2_gguf, n_ctx=512, kv_cache_f32=True, kv_type="q8_0")


def test_plan_command_json(smollm2_gguf, capsys):
    assert main(["plan", str(smollm2_gguf), "--ram", "1G", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["header"]["architecture"] == "llama" and payload["header"]["n_ctx_train"] == 8192
    assert (payload["n_ctx"], payload["helper_n_ctx"], payload["fits"]) == (8192, 8192, True)
    assert payload["total_bytes"] == sum(payload[key] for key in ("weights_bytes", "kv_bytes", "compute_bytes",
                                                                  "helper_bytes", "overhead_bytes"))
    assert payload["total_bytes"] <= payload["usable_bytes"] == int(GiB * 0.85)


def test_plan_command_table_and_refusal(smollm2_gguf, capsys):
    assert main(["plan", str(smollm2_gguf), "--ram", "400M", "--kv-type", "q8_0"]) == 0
    out = capsys.readouterr().out
    assert "KV cache q8_0, flash attention" in out and "total" in out
    assert main(["plan", str(smollm2_gguf), "--ram", "150M"]) == 3
    assert "needs 92.1 MiB for the weights alone" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["plan", str(smollm2_gguf), "--ram", "lots"])
    assert usage.value.code == 2


def test_session_flags_reach_the_engine(smollm2_gguf, tmp_path):
    """``research --kv-type/--ram`` load the engine with the plan; the batched engine refuses them."""
    from venus_edge.cli import build_parser
    from venus_edge.session import SessionSettings, SetupError, _load_engine

    def settings(argv: list[str]) -> SessionSettings:
        return SessionSettings.from_args(build_parser().parse_args(argv))

    base = ["research", "q", "--model", str(smollm2_gguf), "--replay", str(tmp_path), "--threads", "1"]
    with _load_engine(settings([*base, "--n-ctx", "1024", "--kv-type", "q4_0"]), 1) as engine:
        assert (engine.n_ctx, engine.memory_plan.kv_type, engine.memory_plan.flash_attn) == (1024, "q4_0", True)
    with _load_engine(settings([*base, "--ram", "600M"]), 1) as engine:
        assert engine.memory_plan.ram_bytes == 600 * MiB and engine.memory_plan.fits
    with pytest.raises(SetupError, match="--kv-type and --ram"):
        _load_engine(settings([*base, "--ram", "2G"]), 2)


@pytest.mark.parametrize("cores, busy, fit", [
    (2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 4.5, 1),  # the measured busy machine: 1 thread
    (8, 0.3, 8), (8, 2.0, 6), (8, 7.8, 1), (1, 3.0, 1),
])
def test_threads_that_fit_leave_the_busy_cores_to_other_work(cores, busy, fit):
    assert threads_that_fit(cores, busy) == fit


def test_a_busy_machine_gets_one_warning_line_with_the_threads_that_fit():
    """2 threads with the load of the measured busy machine (4-5 on 2 cores): the line names the fix; a quiet
    machine, threads that fit, or an unknown load (no /proc/stat) say nothing."""
    warning = check_threads_fit(2, 2, 4.5)
    assert warning is not None and "\n" not in warning
    assert "4.5 of 2 cores" in warning and "--threads 1" in warning, warning
    assert check_threads_fit(2, 2, 0.2) is None
    assert check_threads_fit(1, 2, 1.0) is None
    assert check_threads_fit(2, 2, None) is None


def test_busy_cores_is_a_share_of_the_machine():
    busy = busy_cores(0.05)
    assert busy is not None and 0.0 <= busy <= (os.cpu_count() or 1), busy


def test_an_engine_given_no_threads_warns_on_a_busy_machine(smollm2_gguf, caplog):
    """Other work on every core (a busy loop per core in child processes): the engine, given no thread count, keeps
    the physical cores and logs the one line with the fix."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    spinners = [context.Process(target=_spin, args=(stop,)) for _ in range(2 * (os.cpu_count() or 1))]
    for spinner in spinners:
        spinner.start()
    try:
        with caplog.at_level(logging.WARNING, logger="venus_edge.memory.machine"):
            engine = LlamaCppEngine(smollm2_gguf, n_ctx=256)
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()
    engine.close()
    assert engine.n_threads == physical_cores()
    assert any("--threads 1" in record.getMessage() for record in caplog.records), caplog.text


def _spin(stop) -> None:
    """A busy loop until ``stop`` is set: other work on a core."""
    while not stop.is_set():
        pass
