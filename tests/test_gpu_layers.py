"""GPU offload (``gpu_layers``): refused with a clear message where llama.cpp would ignore it without a word, and
passed to llama.cpp where it is not. The GPU itself is measured by scripts/gpu_speculative.sh on a GPU machine."""

from __future__ import annotations

import llama_cpp
import pytest

from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.engines.llama_load import check_gpu_layers


@pytest.mark.parametrize("value", [-2, -100, 2**31, 2**32, True, 1.5, "all", None])
def test_values_llama_cpp_does_not_define_are_refused(value):
    with pytest.raises(ValueError, match="gpu_layers must be -1"):
        check_gpu_layers(value)


@pytest.mark.skipif(llama_cpp.llama_supports_gpu_offload(), reason="this llama.cpp build has a GPU backend")
@pytest.mark.parametrize("value", [-1, 1, 99])
def test_a_build_without_gpu_backend_refuses_offload_instead_of_running_on_the_cpu(value, smollm2_gguf):
    with pytest.raises(ValueError, match=r"built without a GPU backend.*GGML_CUDA=on"):
        LlamaCppEngine(smollm2_gguf, n_ctx=512, gpu_layers=value)
    check_gpu_layers(0)  # none asked: fine on any build


def test_the_layers_reach_llama_cpp_and_the_model_facts(smollm2_gguf, monkeypatch):
    """On a CPU build llama.cpp keeps every layer on the CPU whatever it is asked, so the check is what it was
    asked: the model parameters llama-cpp-python built from ``n_gpu_layers``, for the model and its draft model."""
    with LlamaCppEngine(smollm2_gguf, n_ctx=512) as engine:
        assert engine.model_info()["gpu_layers"] == 0 and engine.model_info()["flash_attn"] is False
        assert engine._llm.model_params.n_gpu_layers == 0
    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: True)  # as a CUDA build answers
    with LlamaCppEngine(smollm2_gguf, n_ctx=512, gpu_layers=-1) as engine:
        assert engine.model_info()["flash_attn"] is True  # faster on the GPU (README, On a GPU)
    with LlamaCppEngine(smollm2_gguf, n_ctx=512, gpu_layers=-1, flash_attn=False) as engine:
        assert engine.model_info()["flash_attn"] is False  # asked for: kept
    with LlamaCppEngine(smollm2_gguf, n_ctx=512, gpu_layers=7, draft=smollm2_gguf) as engine:
        assert engine.model_info()["gpu_layers"] == 7
        assert engine._llm.model_params.n_gpu_layers == 7
        assert engine._draft_model is not None
        draft_params = engine._draft_model.model.params
        assert draft_params.n_gpu_layers == 7


def test_a_gguf_judge_runs_on_the_sessions_threads_and_gpu_layers(smollm2_gguf, monkeypatch):
    """``eval --judge FILE.gguf --gpu-layers N --threads T``: the judge is placed as the evaluated model is."""
    from venus_edge.eval.cli import _judge_engine
    from venus_edge.session import SessionSettings

    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: True)  # as a CUDA build answers
    judge = _judge_engine(str(smollm2_gguf), None, SessionSettings(threads=1, gpu_layers=5))
    try:
        assert judge._llm.model_params.n_gpu_layers == 5 and judge.model_info()["gpu_layers"] == 5
        assert judge.n_threads == 1
    finally:
        judge.close()


# ---------------------------------------------------------------------------------------------- the CLI flag


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("command", [["research", "q"], ["eval", "pydocs"], ["serve"], ["mcp"]])
def test_gpu_layers_is_a_flag_of_every_command_that_loads_a_session_engine(command, tmp_path):
    from venus_edge.cli import build_parser
    from venus_edge.session import SessionSettings

    parser = build_parser()
    assert parser.parse_args(command).gpu_layers == 0  # the CPU unless asked
    assert parser.parse_args([*command, "--gpu-layers", "-1"]).gpu_layers == -1
    args = parser.parse_args([*command, "--gpu-layers", "20", "--corpus", str(tmp_path)])
    assert SessionSettings.from_args(args).gpu_layers == 20


@pytest.mark.parametrize("value", ["-2", "all", "1.5", "", "2147483648"])
def test_a_gpu_layers_value_llama_cpp_does_not_define_is_a_usage_error(value, capsys):
    from venus_edge.cli import build_parser

    with pytest.raises(SystemExit) as usage:
        build_parser().parse_args(["research", "q", "--gpu-layers", value])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "argument --gpu-layers" in err and "Traceback" not in err, err


@pytest.mark.parametrize("flags", [
    ["research", "Which module reads TOML?"],
    ["research", "Which module reads TOML?", "--samples", "2"],
    ["research", "Which module reads TOML?", "--engine", "openai", "--base-url", "http://127.0.0.1:9"],
], ids=["one", "samples", "openai"])
def test_gpu_layers_where_it_cannot_apply_is_one_line_before_any_model_loads(flags, docs_corpus, monkeypatch,
                                                                              capsys):
    """On this CPU build: the in-process engines say that llama-cpp-python has no GPU backend and how to get one;
    a model server is told to use its own option. The model does not exist: the refusal comes first."""
    from venus_edge.cli import main

    code = main([*flags, "--model", "/nonexistent/model.gguf", "--corpus", str(docs_corpus), "--gpu-layers", "-1"])
    assert code == 3
    message = _error_line(capsys)
    assert message.startswith("error: --gpu-layers") and "not found" not in message, message
    if "--engine" in flags:
        assert "does not apply to --engine openai" in message and "drop --gpu-layers" in message, message
    elif not llama_cpp.llama_supports_gpu_offload():
        assert "without a GPU backend" in message and "GGML_CUDA=on" in message, message


def test_the_batched_engine_takes_the_layers_too(smollm2_gguf, tmp_path, monkeypatch):
    """Several rollouts at once: the batched engine's model gets ``n_gpu_layers`` and flash attention (faster on a
    GPU); without layers on the GPU it keeps its CPU settings."""
    from venus_edge.session import SessionSettings, _load_engine

    settings = SessionSettings(model=str(smollm2_gguf), replay=tmp_path, threads=1, n_ctx=512)
    engine = _load_engine(settings, 2)
    try:
        assert engine.model_info()["gpu_layers"] == 0 and engine._model.params.n_gpu_layers == 0
    finally:
        engine.close()
    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: True)  # as a CUDA build answers
    engine = _load_engine(SessionSettings(model=str(smollm2_gguf), replay=tmp_path, threads=1, n_ctx=512,
                                          gpu_layers=3), 2)
    try:
        assert engine.model_info()["gpu_layers"] == 3 and engine._model.params.n_gpu_layers == 3
    finally:
        engine.close()


# ---------------------------------------------------------------------------------------------- bench


@pytest.mark.skipif(llama_cpp.llama_supports_gpu_offload(), reason="this llama.cpp build has a GPU backend")
def test_bench_refuses_gpu_layers_on_a_cpu_build_before_it_measures_anything(smollm2_gguf, tmp_path, capsys):
    """A CPU-only build would run a "GPU" bench on the CPU and label its figures GPU ones."""
    from venus_edge.cli import main

    out = tmp_path / "bench"
    with pytest.raises(SystemExit) as usage:
        main(["bench", str(smollm2_gguf), "--gpu-layers", "-1", "--out", str(out), "--quiet"])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "--gpu-layers -1 asks for the GPU" in err and "GGML_CUDA=on" in err and "Traceback" not in err, err
    assert not out.exists()


def test_bench_places_the_engine_the_raw_anchor_and_llama_bench_alike(smollm2_gguf, tmp_path, monkeypatch):
    """``bench --gpu-layers N``: every llama.cpp model the run loads (ours, the raw anchor) is asked for N layers on
    the GPU with flash attention, llama-bench gets ``-ngl N -fa on``, the report says where each ran, and CPU
    figures of the same file are not reused for it (nor its for them). On a CPU build llama.cpp ignores the layers,
    so what is checked is what llama.cpp was asked."""
    import llama_cpp.llama_cpp as bindings

    from venus_edge.bench import BenchConfig, llama_bench_arguments, measure_config, measurement_key
    from venus_edge.bench.report import BenchReport

    asked: list[int] = []
    real_load = bindings.llama_model_load_from_file

    def recorded_load(path: bytes, params: llama_cpp.llama_model_params) -> object:
        asked.append(params.n_gpu_layers)
        return real_load(path, params)

    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: True)  # as a CUDA build answers
    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", recorded_load)
    monkeypatch.setattr(bindings, "llama_model_load_from_file", recorded_load)
    small = {"threads": 1, "n_ctx": 512, "prompt_lengths": (64,), "depths": (0,), "decode_tokens": 8, "repeats": 1,
             "llama_bench": False}
    on_gpu = BenchConfig(smollm2_gguf, gpu_layers=7, **small)
    result = measure_config(on_gpu)
    assert asked == [7, 7], asked  # the engine, then the raw anchor
    assert result.config["gpu_layers"] == 7 and result.decode[0] > 0 and result.raw_decode[0] > 0
    assert on_gpu.name.endswith(" gpu=7") and on_gpu.flash_attn
    assert BenchConfig(smollm2_gguf, gpu_layers=-1, **small).name.endswith(" gpu=all")

    on_cpu = BenchConfig(smollm2_gguf, **small)
    for config, layers, flash in ((on_gpu, "7", "on"), (on_cpu, "0", "off")):
        for arguments in llama_bench_arguments(config).values():
            assert arguments[arguments.index("-ngl") + 1] == layers and arguments[arguments.index("-fa") + 1] == flash
    assert measurement_key(on_gpu, None) != measurement_key(on_cpu, None)

    result.key = measurement_key(on_gpu, None)
    report = BenchReport(results=[result], bandwidth=20e9)
    table = report.markdown()
    assert f"| {smollm2_gguf.name} |" in table and "| 1 +GPU 7 |" in table, table
    limit_row = next(line for line in table.splitlines() if line.startswith(f"| {smollm2_gguf.name} | f16 | -"))
    assert "%" not in limit_row  # the CPU's copy bandwidth does not bound decode on the GPU
