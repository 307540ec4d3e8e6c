"""The bench report explains itself: what was run (a real run on a tiny model), what each column means, remarks on
ratios to an anchor outside the plausible band and on a busy machine, and plots with titles, the llama-bench
points and legends that cover no data (checked on matplotlib's objects, not on pixels)."""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path

import pytest
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.transforms import Bbox

from venus_edge.bench import BenchReport, ConfigResult, llama_bench_path
from venus_edge.cli import main
from venus_edge.memory.header import read_model_header

FLAG = "⚠"


def _result(model: Path, *, decode: dict[int, float], raw: dict[int, float], bench_decode: dict[int, float],
            bench_prefill: dict[int, float], peak_load: float) -> ConfigResult:
    header = read_model_header(model)
    return ConfigResult(
        config={"model": str(model), "kv_type": "f16", "threads": 2},
        model={"name": model.name, "file_type": header.file_type, "weight_bytes": header.weight_bytes},
        load_s=0.5, memory={"weights": 80 * 2**20, "kv": 20 * 2**20, "compute": 10 * 2**20, "rss_used": 100 * 2**20},
        prefill={128: 100.0, 512: 90.0}, ttft_s=1.0, ttft_prompt_tokens=400, decode=decode,
        decode_tokens={d: 64 for d in decode}, raw_decode=raw,
        llama_bench={"decode": bench_decode, "prefill": bench_prefill},
        load_average={"load": 0.5, "decode, and raw llama-cpp-python": peak_load, "end": 0.7},
    )


@pytest.fixture
def report(smollm2_gguf: Path) -> BenchReport:
    """Two configurations on a 2-core machine: the first with three odd ratios, measured under a load of 4.2; the
    second plausible and quiet."""
    odd = _result(smollm2_gguf, decode={0: 20.0, 512: 18.0}, raw={0: 9.0, 512: 17.5},
                  bench_decode={0: 21.0, 512: 5.0}, bench_prefill={128: 110.0, 512: 300.0}, peak_load=4.2)
    plausible = _result(smollm2_gguf, decode={0: 20.0, 512: 18.0}, raw={0: 19.0, 512: 17.5},
                        bench_decode={0: 21.0, 512: 19.0}, bench_prefill={128: 110.0, 512: 95.0}, peak_load=1.9)
    return BenchReport([odd, plausible], bandwidth=10e9, machine={"cpu": "test CPU", "cores": 2})


def test_odd_ratios_and_a_busy_machine_are_remarked(report: BenchReport) -> None:
    remarks = report.remarks()
    assert len(remarks) == 4, remarks  # all from the first configuration
    assert "decode@0: ours / raw is 2.22x, outside 0.5-1.5x" in remarks[0]
    assert "decode@512: ours / llama-bench is 3.60x, outside 0.5-1.5x" in remarks[1]
    assert "prefill@512: ours / llama-bench pp512 is 0.30x, outside 0.5-1.5x" in remarks[2]
    assert "the load average reached 4.2 on 2 physical cores" in remarks[3] and "fewer threads" in remarks[3]
    assert report.to_dict()["remarks"] == remarks
    markdown = report.markdown()
    assert f"20.0 / 9.0 (2.22x {FLAG}) / 21.0 (0.95x)" in markdown
    assert f"18.0 / 17.5 (1.03x) / 5.0 (3.60x {FLAG})" in markdown
    assert f"90.0 / 300.0 (0.30x {FLAG})" in markdown and "20.0 / 19.0 (1.05x)" in markdown
    assert f"| 4.2 {FLAG} |" in markdown and "| 1.9 |" in markdown
    assert markdown.count(f"- {FLAG} ") == 4

    quiet = BenchReport(report.results[1:], bandwidth=10e9, machine={"cpu": "test CPU", "cores": 2})
    plain = quiet.markdown()
    assert quiet.remarks() == [] and "Remarks: none" in plain
    assert f"x {FLAG})" not in plain and f" {FLAG} |" not in plain, "no cell flagged"


def test_every_table_explains_its_columns(report: BenchReport) -> None:
    markdown = report.markdown()
    assert markdown.count("Columns:") == 3  # speed, anchors, limit (no session was replayed)
    for explained in ("TTFT s: seconds to the first token of a DR-Venus first turn (400 tokens",
                      "prefill@N: prompt tokens processed per second", "(llama-bench calls it ppN)",
                      "decode@D: new tokens generated per second", "peak load: the highest one-minute load average",
                      "ours: venus-edge's engine", "raw: llama-cpp-python's own Llama.generate",
                      "llama-bench: llama.cpp's C++ benchmark", "the mean tokens/s of its runs",
                      "decode is tg64 at depth D", "prefill is ppN", "(x): ours divided by the anchor",
                      "limit@D: the decode tokens/s", "KL vs ref: the mean KL divergence", "top-1:", "ppl ratio:"):
        assert explained in markdown, explained
    head = next(line for line in markdown.splitlines() if line.startswith("| model | KV | decode@0 ours"))
    assert "prefill@128 ours / llama-bench" in head and "prefill@512 ours / llama-bench" in head


def _extent(figure: Figure) -> tuple[Bbox, Bbox, list[str]]:
    """The legend's and the axes' boxes in display units, and the legend's texts."""
    figure.draw_without_rendering()
    axis = figure.axes[0]
    legend = axis.get_legend()
    return legend.get_window_extent(), axis.get_window_extent(), [text.get_text() for text in legend.get_texts()]


def test_the_decode_plot_has_a_title_the_llama_bench_points_and_a_legend_beside_the_data(report: BenchReport) -> None:
    figure = report.decode_figure()
    axis = figure.axes[0]
    assert axis.get_title() == "Decode speed against context depth"
    legend, axes, texts = _extent(figure)
    assert "ours (venus-edge)" in texts and "raw llama-cpp-python" in texts
    assert "llama-bench (mean of its runs)" in texts
    assert sum(text.startswith(report.results[0].model["name"]) for text in texts) == 2  # one per configuration
    crosses = [line for line in axis.get_lines() if line.get_marker() == "x"]
    assert [list(line.get_ydata()) for line in crosses] == [[21.0, 5.0], [21.0, 19.0]]
    assert not legend.overlaps(axes), (legend, axes)


def test_the_memory_plot_has_a_title_and_a_legend_that_covers_no_bar(report: BenchReport) -> None:
    figure = report.memory_figure()
    axis = figure.axes[0]
    assert axis.get_title().startswith("Memory per configuration")
    legend, axes, texts = _extent(figure)
    assert sorted(texts) == ["KV cache (planned)", "RSS growth (measured)", "compute (planned)", "weights (planned)"]
    bars = [patch for patch in axis.patches if isinstance(patch, Rectangle)]
    assert len(bars) == 6  # three parts of two configurations
    assert not any(legend.overlaps(bar.get_window_extent()) for bar in bars)
    [dots] = [c for c in axis.collections if isinstance(c, PathCollection)]
    points = axis.transData.transform(dots.get_offsets())  # the dots' centres in display units
    assert len(points) == 2 and not any(legend.contains(x, y) for x, y in points)
    assert not legend.overlaps(axes)


def test_the_report_files_hold_the_remarks(report: BenchReport, tmp_path: Path) -> None:
    written = report.write(tmp_path)
    assert [path.name for path in written] == ["report.md", "report.json", "decode.png", "memory.png"]
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["remarks"] == report.remarks() and saved["run"] is None
    assert saved["results"][0]["load_average"]["decode, and raw llama-cpp-python"] == 4.2


def test_a_real_bench_run_records_what_was_run(tiny_qwen3_gguf: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    arguments = ["bench", str(tiny_qwen3_gguf), "--n-ctx", "1024", "--prompt-lengths", "64", "--depths", "0",
                 "--decode-tokens", "8", "--repeats", "1", "--no-session", "--out", str(out), "--quiet", "--no-plot"]
    assert main(arguments) == 0
    saved = json.loads((out / "report.json").read_text())
    run = saved["run"]
    assert run["command"] == "bench" and run["command_line"] == arguments
    assert run["venus_edge_version"] == version("venus-edge")
    assert run["llama_cpp_python_version"] == version("llama_cpp_python")
    [model] = run["models"]
    assert model["path"] == str(tiny_qwen3_gguf.resolve()) and model["file_type"] == "F16"
    assert model["sha256"] == hashlib.sha256(tiny_qwen3_gguf.read_bytes()).hexdigest()
    flags = run["flags"]
    assert (flags["models"], flags["n_ctx"], flags["prompt_lengths"], flags["depths"]) == (
        [str(tiny_qwen3_gguf)], 1024, [64], [0])
    assert (flags["decode_tokens"], flags["repeats"], flags["no_session"], flags["out"]) == (8, 1, True, str(out))
    [result] = saved["results"]
    assert set(result["load_average"]) == {"load", "prefill", "first turn", "decode, and raw llama-cpp-python",
                                           "llama-bench", "end"}
    assert all(isinstance(load, float) and load >= 0 for load in result["load_average"].values())
    assert isinstance(saved["remarks"], list)
    markdown = (out / "report.md").read_text()
    assert "## What was run" in markdown and f"sha256 `{model['sha256']}`" in markdown
    assert "| flags.n_ctx | 1024 |" in markdown and markdown.count("Columns:") == 3
    if llama_bench_path() is not None:
        assert set(result["llama_bench"]["decode"]) == {"0"}


def test_progress_to_a_file_is_a_plain_line_per_stage(tmp_path: Path) -> None:
    """Where stderr is not a terminal (a log file, a pipe), each stage gets one flushed line, no terminal codes;
    --quiet prints nothing."""
    from venus_edge.bench.cli import _progress_bar

    for quiet in (False, True):
        log = tmp_path / f"bench-{quiet}.log"
        with log.open("w") as stream, _progress_bar(2, quiet=quiet, stream=stream) as advance:
            advance("tiny f16 t2: load")
            assert log.read_text().count("\n") == (0 if quiet else 1)  # flushed as it happens
            advance("tiny f16 t2: decode")
        lines = log.read_text().splitlines()
        if quiet:
            assert lines == []
        else:
            assert [line.split(", ")[:2] for line in lines] == [["bench: stage 1/2", "tiny f16 t2: load"],
                                                                 ["bench: stage 2/2", "tiny f16 t2: decode"]]
            assert all(line.endswith(" s elapsed") and "\x1b" not in line for line in lines)
