"""The report of ``venus-edge bench``: Markdown tables, JSON, and PNG plots (matplotlib, the ``eval`` extra).

Tables: speed and memory per configuration; the anchors (raw llama-cpp-python and llama-bench) as ratios; the
bandwidth limit and the quality against the reference file; the replayed session. Each table is followed by what
its columns mean. Remarks flag figures to doubt: a ratio to an anchor outside ``RATIO_BAND`` (the two run the same
file, threads and KV type, so a larger gap means a disturbed measurement, not a real difference), a load average
above the cores during the measurements (other work shared the CPU), and each stage during which other processes
used more than ``BUSY_OTHERS_CORES`` of a core (``ConfigResult.busy_stages``), whose figures carry ``BUSY_MARK``.
The heading says what the run expected and took, and, for a report of a run stopped or still going, which
configurations are not measured yet. The report ends with what was run (``venus_edge.provenance.RunRecord``).
``report.json`` holds every figure (``BenchReport.to_dict``), the remarks and the record; both files are replaced in
one step each (a temporary file renamed), so a reader or a killed run never leaves half of one. Plots: decode speed
against depth (ours, raw and llama-bench) and memory per configuration, each titled, with its legend outside the
axes.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus_edge.bench.measure import BUSY_OTHERS_CORES, ConfigResult, bandwidth_limit, kv_per_token
from venus_edge.memory.plan import format_bytes
from venus_edge.provenance import RunRecord

if TYPE_CHECKING:  # matplotlib is imported when a plot is drawn
    from matplotlib.figure import Figure

__all__ = ["BenchReport", "format_duration"]

#: Ours / an anchor outside this band (low, high) is flagged in the report.
RATIO_BAND = (0.5, 1.5)
#: A one-minute load average above the physical cores plus this is flagged (this run's own threads count in it).
LOAD_MARGIN = 0.5
FLAG = "⚠"
#: Marks a figure taken while other processes used more than ``BUSY_OTHERS_CORES`` of a core.
BUSY_MARK = "†"
#: The stage of ``measure_config`` that measures each figure of the tables (a busy stage marks them).
LOAD_STAGE, PREFILL_STAGE, FIRST_TURN_STAGE, SESSION_STAGE = "load", "prefill", "first turn", "session"
DECODE_STAGE, LLAMA_BENCH_STAGE = "decode, and raw llama-cpp-python", "llama-bench"


@dataclass
class BenchReport:
    """Every configuration's result, and the machine they ran on.

    Attributes:
        results: one ``ConfigResult`` per configuration, in run order.
        bandwidth: the machine's memory copy bandwidth, bytes/s (``memory_bandwidth``), or 0 when not measured.
        machine: CPU, cores, Python and llama-cpp-python versions.
        reference: the file the quality figures are measured against, or None.
        run: what was run (the model files and their hashes, the flags, versions, machine, date), or None.
        estimated_s: the run's expected seconds, estimated before it measured anything, or None.
        elapsed_s: seconds this run has taken so far (reused results took none), or None.
        reused: how many of ``results`` were reused from an earlier run (same file and settings).
        pending: the configurations not measured yet (a run stopped or still going), by ``BenchConfig.name``.
    """

    results: list[ConfigResult]
    bandwidth: float = 0.0
    machine: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None
    run: RunRecord | None = None
    estimated_s: float | None = None
    elapsed_s: float | None = None
    reused: int = 0
    pending: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Every figure, the remarks and the run record, JSON-ready (``report.json``)."""
        return {"machine": self.machine, "bandwidth_bytes_per_s": self.bandwidth, "reference": self.reference,
                "timing": {"estimated_s": self.estimated_s, "elapsed_s": self.elapsed_s, "reused": self.reused},
                "pending": self.pending, "results": [result.to_dict() for result in self.results],
                "remarks": self.remarks(), "run": self.run.to_dict() if self.run else None}

    # ------------------------------------------------------------------------------------------ remarks
    def peak_load(self, result: ConfigResult) -> float | None:
        """The highest one-minute load average seen while ``result`` was measured, or None when none was read."""
        loads = [load for load in result.load_average.values() if load is not None]
        return max(loads) if loads else None

    def busy(self, result: ConfigResult) -> bool:
        """Other work shared the CPU while ``result`` was measured: the load average rose above the physical cores
        (plus ``LOAD_MARGIN``)."""
        peak, cores = self.peak_load(result), int(self.machine.get("cores") or 0)
        return peak is not None and cores > 0 and peak > cores + LOAD_MARGIN

    def remarks(self) -> list[str]:
        """The figures to doubt, one sentence each with what to do: ratios to an anchor outside ``RATIO_BAND``,
        configurations measured while the load average was above the cores, and stages measured while other
        processes used more than ``BUSY_OTHERS_CORES`` of a core."""
        low, high = RATIO_BAND
        band = f"{low:g}-{high:g}x"
        remarks = []
        for r in self.results:
            label = f"{r.model['name']} (KV {r.config['kv_type']}, {r.config['threads']} threads)"
            bench = r.llama_bench or {}
            for depth, ours in r.decode.items():
                raw = r.raw_decode.get(depth)
                if _odd(ours, raw):
                    remarks.append(
                        f"{label}, decode@{depth}: ours / raw is {_ratio(ours, raw)}, outside {band}. The two take "
                        "turns on the same file, threads, KV type and prompt, so they should be close: the load on "
                        "the machine changed between their runs, or one stopped early (the model ended its text); "
                        "rerun on a quiet machine with more --repeats.")
                if _odd(ours, bench.get("decode", {}).get(depth)):
                    remarks.append(
                        f"{label}, decode@{depth}: ours / llama-bench is {_ratio(ours, bench['decode'][depth])}, "
                        f"outside {band}. llama-bench is C++ alone (random tokens, no sampler, the mean of its "
                        "runs), ours the best run of a real prompt through Python: on a small model the Python "
                        "layer's few milliseconds per token alone can put ours below 0.5x; otherwise suspect other "
                        "load on the machine, or a llama-bench built from another llama.cpp than llama-cpp-python's.")
            for length, ours in r.prefill.items():
                if _odd(ours, bench.get("prefill", {}).get(length)):
                    remarks.append(
                        f"{label}, prefill@{length}: ours / llama-bench pp{length} is "
                        f"{_ratio(ours, bench['prefill'][length])}, outside {band}: other load on the machine, or "
                        "another batch size or llama.cpp build.")
            if self.busy(r):
                remarks.append(
                    f"{label}: the load average reached {self.peak_load(r):.1f} on {self.machine['cores']} physical "
                    f"cores while it was measured (its own {r.config['threads']} threads count in it): other work "
                    "shared the CPU, so its speeds are lower and noisier than on a quiet machine; rerun when the "
                    "machine is quiet, or with fewer threads.")
            for stage, others in r.busy_stages().items():
                remarks.append(
                    f"{label}: figures of {stage} (marked {BUSY_MARK}) were taken while other processes used "
                    f"{others:.2f} of {self.machine.get('cores', '?')} cores (more than {BUSY_OTHERS_CORES:g}): they "
                    "are lower and noisier than on a quiet machine, and a ratio to an anchor can be far off "
                    "(llama-bench's spinning threads starve first); rerun on a quiet machine.")
        return remarks

    # ------------------------------------------------------------------------------------------ markdown
    def markdown(self) -> str:
        """The report as Markdown: a heading with the machine, then the tables, each followed by what its columns
        mean, the remarks, and what was run."""
        lines = [f"# venus-edge bench: {self.machine.get('cpu', platform.machine())}, "
                 f"{self.machine.get('cores', '?')} cores, copy bandwidth {self.bandwidth / 1e9:.1f} GB/s", ""]
        lines += self._progress_lines()
        if not self.results:  # a run that has not finished its first configuration yet
            lines += ["No configuration measured yet."]
        else:
            lines += self._speed_table() + [""] + self._anchor_table() + [""] + self._remarks_section() + [""]
            lines += self._limit_table()
        if any(r.session for r in self.results):
            lines += [""] + self._session_table()
        skipped = sorted({note for r in self.results for note in r.skipped})
        if skipped:
            lines += ["", "Not measured: " + "; ".join(skipped)]
        if self.run is not None:
            lines += ["", self.run.markdown().rstrip("\n")]
        return "\n".join(lines) + "\n"

    def _progress_lines(self) -> list[str]:
        """What the run expected and took, what it reused, and what it has not measured yet."""
        lines = []
        if self.pending:
            done = len(self.results)
            lines += [f"**Incomplete**: {done} of {done + len(self.pending)} configurations measured; not yet: "
                      f"{', '.join(self.pending)} (the run was stopped or is still going; a rerun with the same --out "
                      "measures only these).", ""]
        timing = []
        if self.estimated_s is not None:
            timing.append(f"expected time {format_duration(self.estimated_s)} (estimated before measuring, from the "
                          "model sizes, stages, repeats, prompt lengths and depths)")
        if self.elapsed_s is not None:
            timing.append(f"{'took so far' if self.pending else 'took'} {format_duration(self.elapsed_s)}")
        if self.reused:
            timing.append(f"{self.reused} configuration{'s' * (self.reused != 1)} reused from an earlier run "
                          "(same file and settings; --fresh measures them again)")
        return lines + (["Run: " + "; ".join(timing) + ".", ""] if timing else [])

    def _speed_table(self) -> list[str]:
        first = self.results[0]
        lengths, depths = list(first.prefill), list(first.decode)
        head = (["model", "type", "KV", "threads", "load s", "weights", "KV cache", "compute", "RSS used", "TTFT s"]
                + [f"prefill@{n}" for n in lengths] + [f"decode@{d}" for d in depths] + ["peak load", "others' CPU"])
        rows = []
        for r in self.results:
            c, m = r.config, r.memory
            peak = self.peak_load(r)
            load = "-" if peak is None else f"{peak:.1f}" + (f" {FLAG}" if self.busy(r) else "")
            busy = r.busy_stages()
            prefill, decode = _mark(busy, PREFILL_STAGE), _mark(busy, DECODE_STAGE)
            rows.append([r.model["name"], r.model.get("file_type") or "?", c["kv_type"],
                         str(c["threads"]) + _gpu_placement(c), f"{r.load_s:.2f}{_mark(busy, LOAD_STAGE)}",
                         format_bytes(m["weights"]), format_bytes(m["kv"]), format_bytes(m["compute"]),
                         format_bytes(m.get("rss_used", 0)),
                         f"{r.ttft_s:.2f}{_mark(busy, FIRST_TURN_STAGE)}"]
                        + [f"{r.prefill.get(n, 0):.1f}{prefill}" for n in lengths]
                        + [f"{r.decode.get(d, 0):.1f}{decode}" for d in depths] + [load, _others(r)])
        legend = [
            "model, type: the GGUF file and its quant type; KV: the KV-cache type; threads: llama.cpp threads "
            "(+GPU N: N layers on the GPU, all: every layer)",
            "load s: seconds to load the engine (map the file, allocate the context)",
            "weights, KV cache, compute: the memory the planner expects for each part (venus_edge.memory)",
            "RSS used: how much this process's resident memory grew over the load and every test (measured)",
            f"TTFT s: seconds to the first token of a DR-Venus first turn ({first.ttft_prompt_tokens} tokens: the "
            "system prompt with the tool schemas and a question), without the prompt cache",
            "prefill@N: prompt tokens processed per second, a fresh N-token prompt (llama-bench calls it ppN); best "
            "of --repeats",
            "decode@D: new tokens generated per second, one at a time (greedy), after a context of D tokens "
            "(llama-bench's tg test at depth D); best of --repeats",
            f"peak load: the highest one-minute load average seen during the tests (this run's threads included); "
            f"{FLAG} above the physical cores: other work shared the CPU (see Remarks)",
            "others' CPU: the most cores' worth of CPU that other processes used during one of its stages (from "
            "/proc/stat: all CPUs' busy time less this run's, llama-bench included); "
            f"{BUSY_MARK} on it and on a figure: taken while others used more than {BUSY_OTHERS_CORES:g} of a core, "
            "not to be trusted (see Remarks)",
        ]
        return ["Speed (tokens/s) and memory", ""] + _table(head, rows) + ["", *_legend(legend)]

    def _anchor_table(self) -> list[str]:
        first = self.results[0]
        depths, lengths = list(first.decode), list(first.prefill)
        head = (["model", "KV"] + [f"decode@{d} ours / raw / llama-bench" for d in depths]
                + [f"prefill@{n} ours / llama-bench" for n in lengths])
        rows = []
        for r in self.results:
            bench = r.llama_bench or {}
            busy = r.busy_stages()
            decode, prefill = _mark(busy, DECODE_STAGE), _mark(busy, PREFILL_STAGE)
            theirs = _mark(busy, LLAMA_BENCH_STAGE)
            cells = []
            for d in depths:
                ours, raw = r.decode.get(d, 0.0), r.raw_decode.get(d, 0.0)
                cell = f"{ours:.1f}{decode} / {raw:.1f}{decode} ({_flagged_ratio(ours, raw)})"
                anchor = bench.get("decode", {}).get(d)
                cell += f" / {anchor:.1f}{theirs} ({_flagged_ratio(ours, anchor)})" if anchor else " / -"
                cells.append(cell)
            for n in lengths:
                ours, anchor = r.prefill.get(n, 0.0), bench.get("prefill", {}).get(n)
                cells.append(f"{ours:.1f}{prefill} / {anchor:.1f}{theirs} ({_flagged_ratio(ours, anchor)})" if anchor
                             else f"{ours:.1f}{prefill} / -")
            rows.append([r.model["name"], r.config["kv_type"], *cells])
        low, high = RATIO_BAND
        decode_tokens = max((n for r in self.results for n in r.decode_tokens.values()), default=0)
        legend = [
            "ours: venus-edge's engine, the decode@D and prefill@N figures above (tokens/s)",
            "raw: llama-cpp-python's own Llama.generate on the same file, threads, KV type and prompt with the same "
            "greedy sampler, taking turns with ours run by run (best of --repeats): the binding without venus-edge",
            "llama-bench: llama.cpp's C++ benchmark on the same file, threads and KV type, the mean tokens/s of its "
            f"runs: decode is tg{decode_tokens or 'N'} at depth D (-n, -d), prefill is ppN (-p); random tokens, no "
            "sampler; '-' when it is not built",
            f"(x): ours divided by the anchor, 1.00x the same speed; {FLAG} outside {low:g}-{high:g}x (see Remarks)",
            f"{BUSY_MARK}: taken while other processes used more than {BUSY_OTHERS_CORES:g} of a core (see Remarks)",
        ]
        title = "Decode and prefill against the anchors, same file and threads (ours / anchor in brackets)"
        return [title, ""] + _table(head, rows) + ["", *_legend(legend)]

    def _remarks_section(self) -> list[str]:
        remarks = self.remarks()
        if not remarks:
            low, high = RATIO_BAND
            return [f"Remarks: none (every ratio to an anchor within {low:g}-{high:g}x, the load average within the "
                    f"cores, other processes' CPU within {BUSY_OTHERS_CORES:g} of a core in every stage)."]
        return ["Remarks:", "", *(f"- {FLAG} {remark}" for remark in remarks)]

    def _limit_table(self) -> list[str]:
        depths = list(self.results[0].decode)
        head = ["model", "KV"] + [f"limit@{d}" for d in depths] + [f"of limit@{d}" for d in depths] + \
            ["KL vs ref", "top-1", "ppl ratio"]
        rows = []
        for r in self.results:
            per_token = kv_per_token(Path(r.config["model"]), r.config["kv_type"])
            on_cpu = self.bandwidth and not r.config.get("gpu_layers")  # GPU layers: another memory, unmeasured
            limits = [bandwidth_limit(self.bandwidth, r.model["weight_bytes"], per_token, d) if on_cpu else 0.0
                      for d in depths]
            quality = r.quality or {}
            rows.append([r.model["name"], r.config["kv_type"]] + [f"{limit:.1f}" if limit else "-" for limit in limits]
                        + [f"{r.decode.get(d, 0) / limit:.0%}" if limit else "-" for d, limit in zip(depths, limits)]
                        + [f"{quality['mean_kl']:.4f}" if "mean_kl" in quality else "-",
                           f"{quality['top1_agreement']:.3f}" if "top1_agreement" in quality else "-",
                           f"{quality['ppl_ratio']:.3f}" if "ppl_ratio" in quality else "-"])
        legend = [
            "limit@D: the decode tokens/s the machine's copy bandwidth allows when each token reads every weight "
            "byte and the KV cache of D tokens once",
            "of limit@D: decode@D as a share of that limit (decode on a CPU is memory-bound: near 100% is near what "
            "the hardware can do); - with GPU layers, whose memory the copy bandwidth does not measure",
            "KL vs ref: the mean KL divergence of the next-token distributions from the reference file's, nats per "
            "token (0: the same)",
            "top-1: the share of positions whose most likely next token is the reference's",
            "ppl ratio: perplexity over the reference's on the same text (1.000: the same)",
        ]
        return [f"The memory-bandwidth limit (tokens/s = bandwidth / (weights + KV read per token)) and the quality "
                f"against {Path(self.reference).name if self.reference else 'no reference'} (the replayed session's "
                f"question, calls and tool results, or a fixed text without a session)", ""] + \
            _table(head, rows) + ["", *_legend(legend)]

    def _session_table(self) -> list[str]:
        head = ["model", "KV", "turns", "total s", "s per turn", "prompt evaluated", "prompt reused", "reused share"]
        rows = []
        for r in self.results:
            s = r.session
            if not s:
                continue
            turns, total = len(s["turns"]), s["evaluated"] + s["reused"]
            rows.append([r.model["name"], r.config["kv_type"], str(turns),
                         f"{s['total_s']:.1f}{_mark(r.busy_stages(), SESSION_STAGE)}",
                         f"{s['total_s'] / turns:.2f}", f"{s['evaluated']:,}", f"{s['reused']:,}",
                         f"{s['reused'] / total:.0%}" if total else "-"])
        legend = [
            "turns: the recorded turns replayed (those whose prompt fits in --n-ctx); total s, s per turn: prefill "
            "and decode time of the replay",
            "prompt evaluated / reused: prompt tokens computed against those taken from the KV cache of the turn "
            "before; reused share: reused / (evaluated + reused)",
            f"{BUSY_MARK}: replayed while other processes used more than {BUSY_OTHERS_CORES:g} of a core",
        ]
        return ["A recorded agent session replayed (its prompts, the recorded tool results; greedy, each turn as "
                "long as recorded up to 256 tokens)", ""] + _table(head, rows) + ["", *_legend(legend)]

    # ------------------------------------------------------------------------------------------ files
    def write(self, out: Path, *, plots: bool = True) -> list[Path]:
        """Write ``report.md``, ``report.json`` and, with matplotlib, ``decode.png`` and ``memory.png`` into
        ``out`` (created); the paths written. Each report file is replaced in one step (written beside it under
        another name, then renamed), so a run killed while writing leaves the previous version whole."""
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "report.md", out / "report.json"]
        _replace_file(written[0], self.markdown())
        _replace_file(written[1], json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")
        if plots:
            written += self._plots(out)
        return written

    def _plots(self, out: Path) -> list[Path]:
        try:
            import matplotlib  # noqa: F401
        except ImportError:  # the eval extra is not installed
            return []
        written = []
        for name, figure in (("decode.png", self.decode_figure()), ("memory.png", self.memory_figure())):
            figure.savefig(out / name, dpi=110, bbox_inches="tight")  # "tight": the legend beside the axes is kept
            written.append(out / name)
        return written

    def decode_figure(self) -> Figure:
        """Decode tokens/s against context depth, one colour per configuration: ours (solid, dots), raw
        llama-cpp-python (dotted) and llama-bench's mean (crosses); the legend beside the axes.

        Raises:
            ImportError: matplotlib is not installed (the ``eval`` extra).
        """
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D

        figure = Figure(figsize=(9, 4.5))
        axis = figure.subplots()
        for r in self.results:
            depths = list(r.decode)
            line, = axis.plot(depths, [r.decode[d] for d in depths], marker="o",
                              label=f"{r.model['name']} ({r.model.get('file_type')}, KV {r.config['kv_type']}, "
                                    f"{r.config['threads']} threads)")
            if r.raw_decode:
                raw_depths = list(r.raw_decode)
                axis.plot(raw_depths, [r.raw_decode[d] for d in raw_depths], linestyle=":", color=line.get_color())
            bench = (r.llama_bench or {}).get("decode", {})
            if bench:
                axis.plot(list(bench), list(bench.values()), linestyle="none", marker="x", markersize=8,
                          color=line.get_color())
        styles = [Line2D([], [], color="grey", marker="o", label="ours (venus-edge)"),
                  Line2D([], [], color="grey", linestyle=":", label="raw llama-cpp-python"),
                  Line2D([], [], color="grey", linestyle="none", marker="x", label="llama-bench (mean of its runs)")]
        axis.set_title("Decode speed against context depth")
        axis.set_xlabel("context depth (tokens)")
        axis.set_ylabel("decode tokens/s")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        handles, _ = axis.get_legend_handles_labels()
        axis.legend(handles=handles + styles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                    borderaxespad=0.0)
        figure.tight_layout()
        return figure

    def memory_figure(self) -> Figure:
        """The planned memory of each configuration as stacked bars (weights, KV cache, compute) and the measured
        RSS growth as dots, MiB; the legend beside the axes.

        Raises:
            ImportError: matplotlib is not installed (the ``eval`` extra).
        """
        from matplotlib.figure import Figure

        figure = Figure(figsize=(9, 4.5))
        axis = figure.subplots()
        names = [f"{r.model['name']}\nKV {r.config['kv_type']}, {r.config['threads']} threads" for r in self.results]
        positions = list(range(len(self.results)))
        bottom = [0.0] * len(self.results)
        for part in ("weights", "kv", "compute"):
            values = [r.memory[part] / 2**20 for r in self.results]
            axis.bar(positions, values, bottom=bottom, label={"kv": "KV cache"}.get(part, part) + " (planned)")
            bottom = [b + v for b, v in zip(bottom, values)]
        axis.scatter(positions, [r.memory.get("rss_used", 0) / 2**20 for r in self.results], color="black", zorder=3,
                     label="RSS growth (measured)")
        axis.set_xticks(positions, names)
        axis.set_title("Memory per configuration: planned (bars) and measured (dots)")
        axis.set_ylabel("MiB")
        axis.tick_params(axis="x", labelsize=7)
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        figure.tight_layout()
        return figure


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``1 h 20 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _replace_file(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path`` (atomic on one file system)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _mark(busy: dict[str, float], stage: str) -> str:
    """``BUSY_MARK`` after a figure of ``stage`` when it was busy (``ConfigResult.busy_stages``), else nothing."""
    return BUSY_MARK if stage in busy else ""


def _others(result: ConfigResult) -> str:
    """The most cores' worth of CPU other processes used during one stage, marked when over the threshold."""
    during = [others for load in result.stages.values() if (others := load.get("others_during")) is not None]
    if not during:
        return "-"
    return f"{max(during):.2f}" + (f" {BUSY_MARK}" if result.busy_stages() else "")


def _ratio(ours: float, anchor: float | None) -> str:
    return f"{ours / anchor:.2f}x" if anchor else "-"


def _odd(ours: float, anchor: float | None) -> bool:
    """Ours / anchor falls outside ``RATIO_BAND`` (both measured)."""
    if not anchor or not ours:
        return False
    low, high = RATIO_BAND
    return not low <= ours / anchor <= high


def _flagged_ratio(ours: float, anchor: float | None) -> str:
    return _ratio(ours, anchor) + (f" {FLAG}" if _odd(ours, anchor) else "")


def _legend(entries: list[str]) -> list[str]:
    return ["Columns:", *(f"- {entry}" for entry in entries)]


def _gpu_placement(config: dict[str, Any]) -> str:
    """`` +GPU N`` (``all`` for -1) for a configuration with layers on the GPU, else nothing."""
    layers = config.get("gpu_layers") or 0  # reports written before bench had --gpu-layers lack it
    return "" if not layers else f" +GPU {'all' if layers == -1 else layers}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(row) + " |" for row in rows]
