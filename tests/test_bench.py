"""``venus-edge bench`` on real small models: every figure present and consistent, the anchors measured, the
report written, and the parts (bandwidth, limit, session replay, reference choice) on hand-checkable cases."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from venus_edge.bench import (
    BenchConfig,
    bandwidth_limit,
    llama_bench_path,
    load_session,
    memory_bandwidth,
    pick_reference,
    replay_session,
    run_bench,
    shipped_session_path,
)
from venus_edge.cli import main
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.quantize.quantize import quantize_gguf

if TYPE_CHECKING:
    from conftest import RealModelRun


@pytest.fixture(scope="module")
def tiny_quants(tiny_qwen3_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("bench-quants")
    return [tiny_qwen3_gguf, quantize_gguf(tiny_qwen3_gguf, folder / "tiny-q8_0.gguf", "Q8_0").out_path]


def test_bench_reports_every_figure_for_each_quant_and_kv_type(tiny_quants: list[Path], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    code = main(["bench", *map(str, tiny_quants), "--n-ctx", "2048", "--kv", "f16,q8_0", "--threads", "2",
                 "--prompt-lengths", "64,256", "--depths", "0,512", "--decode-tokens", "16", "--repeats", "1",
                 "--out", str(out), "--quiet"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    results = report["results"]
    assert [(Path(r["config"]["model"]).name, r["config"]["kv_type"]) for r in results] == [
        (tiny_quants[0].name, "f16"), (tiny_quants[0].name, "q8_0"), (tiny_quants[1].name, "f16"),
        (tiny_quants[1].name, "q8_0")]
    assert report["bandwidth_bytes_per_s"] > 1e8 and report["reference"] == str(tiny_quants[0])
    for r in results:
        assert r["load_s"] > 0 and r["ttft_s"] > 0 and r["ttft_prompt_tokens"] > 300
        assert set(r["prefill"]) == {"64", "256"} and all(v > 0 for v in r["prefill"].values())
        assert set(r["decode"]) == {"0", "512"} and all(v > 0 for v in r["decode"].values())
        assert all(v > 0 for v in r["raw_decode"].values())
        assert r["memory"]["weights"] > 0 and r["memory"]["kv"] > 0 and r["memory"]["rss_used"] > 0
        if llama_bench_path() is not None:
            assert set(r["llama_bench"]["decode"]) == {"0", "512"} and set(r["llama_bench"]["prefill"]) == {"64", "256"}
        session = r["session"]
        assert len(session["turns"]) == 2 and session["turns_not_replayed"] == 3  # the rest needs more than 2048
        assert all(t["evaluated"] + t["reused"] == t["prompt_tokens"] for t in session["turns"])
        assert session["reused"] > 0  # later turns reuse the KV cache of the earlier ones
    # A q8_0 KV cache is about half of f16's (34 bytes per 32 values against 64).
    assert results[1]["memory"]["kv"] < 0.6 * results[0]["memory"]["kv"]
    assert results[0]["quality"] == {"reference": True}
    quality = results[2]["quality"]
    assert quality["n_tokens"] > 100 and 0 <= quality["mean_kl"] < 0.05 and quality["top1_agreement"] > 0.9
    markdown = (out / "report.md").read_text()
    assert markdown == capsys.readouterr().out.rstrip("\n") + "\n"
    assert markdown.count(f"| {tiny_quants[1].name} |") >= 4 and "of limit@512" in markdown
    assert (out / "decode.png").stat().st_size > 10_000 and (out / "memory.png").stat().st_size > 10_000


def test_bench_refuses_tests_that_do_not_fit_the_context(tiny_quants: list[Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", str(tiny_quants[0]), "--n-ctx", "512", "--depths", "0,1024"])
    assert exited.value.code == 2 and "raise --n-ctx" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", str(tiny_quants[0]), "--kv", "q5_1"])
    with pytest.raises(SystemExit) as exited:
        main(["bench", str(tiny_quants[0]), "--session", "s.jsonl", "--no-session"])
    assert exited.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_the_shipped_session_replays_with_growing_kv_reuse(tiny_qwen3_gguf: Path, real_model_run: RealModelRun) -> None:
    session = load_session(shipped_session_path())
    assert len(session.turns) >= 3 and any(t.tool_call for t in session.turns)
    with LlamaCppEngine(tiny_qwen3_gguf, n_ctx=8192, helper_n_ctx=0,
                        **{"n_threads": 2, **real_model_run.engine_args()}) as engine:
        replay = replay_session(engine, session, max_tokens=4)
    turns = replay["turns"]
    assert len(turns) == len(session.turns)
    assert turns[0]["reused"] == 0 and all(t["reused"] > 0 for t in turns[1:])
    assert all(later["prompt_tokens"] > earlier["prompt_tokens"] for earlier, later in itertools.pairwise(turns))
    assert replay["total_s"] == pytest.approx(sum(t["total_s"] for t in turns), abs=0.01)


def test_bandwidth_and_its_decode_limit() -> None:
    bandwidth = memory_bandwidth(size_bytes=64 * 2**20, threads=2, repeats=2)
    assert 1e8 < bandwidth < 1e13
    # 10 GB/s over 1 GB of weights is 10 tokens/s; at depth 1000 with 1 MB of KV per token, 5.
    assert bandwidth_limit(10e9, 10**9, 0, 0) == pytest.approx(10.0)
    assert bandwidth_limit(10e9, 10**9, 10**6, 1000) == pytest.approx(5.0)
    with pytest.raises(ValueError):
        memory_bandwidth(size_bytes=1000)


def test_the_reference_is_the_unquantized_file_of_one_checkpoint(tiny_quants: list[Path], smollm2_gguf: Path) -> None:
    assert pick_reference(list(reversed(tiny_quants))) == tiny_quants[0]
    assert pick_reference([tiny_quants[1]]) is None
    assert pick_reference([tiny_quants[0], smollm2_gguf]) is None  # two checkpoints: nothing to compare


def test_a_config_checks_its_tests_fit() -> None:
    with pytest.raises(ValueError, match="raise --n-ctx"):
        BenchConfig(Path("m.gguf"), n_ctx=1024, depths=(1000,), decode_tokens=64)


def test_no_llama_cpp_compute_of_a_bench_run_is_on_the_main_thread(tiny_quants: list[Path],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp keeps one OpenMP thread team per calling thread, and a team on the main thread fights the engine's
    decode-thread team for the cores (SmolLM2 on 2 cores: ours 71-80 tokens/s before raw llama-cpp-python decoded on
    the main thread, 31-41 after). Every ``llama_decode`` of a run (ours, the raw anchor, the quality check) is
    recorded with its thread: none is the main one."""
    import llama_cpp
    import llama_cpp.llama_cpp as bindings

    threads: list[str] = []
    real_decode = bindings.llama_decode

    def recorded_decode(*args: object) -> int:
        threads.append(threading.current_thread().name)
        return int(real_decode(*args))

    monkeypatch.setattr(bindings, "llama_decode", recorded_decode)
    monkeypatch.setattr(llama_cpp, "llama_decode", recorded_decode)
    configs = [BenchConfig(model, threads=2, n_ctx=512, prompt_lengths=(64,), depths=(0,), decode_tokens=8,
                           repeats=1, llama_bench=False) for model in tiny_quants]
    report = run_bench(configs, reference=tiny_quants[0], measure_bandwidth=False)
    assert report.results[1].quality and "mean_kl" in report.results[1].quality
    assert len(threads) > 10 and all(r.raw_decode[0] > 0 for r in report.results)
    assert threading.main_thread().name not in threads, sorted(set(threads))
