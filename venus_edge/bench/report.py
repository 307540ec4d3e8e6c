"""The report of ``venus-edge bench``: Markdown tables, JSON, and PNG plots (matplotlib, the ``eval`` extra).

Tables: speed and memory per configuration; the anchors (raw llama-cpp-python and llama-bench) as ratios; the
bandwidth limit and the quality against the reference file; the replayed session. ``report.json`` holds every
figure (``BenchReport.to_dict``).
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venus_edge.bench.measure import ConfigResult, bandwidth_limit, kv_per_token
from venus_edge.memory.plan import format_bytes

__all__ = ["BenchReport"]


@dataclass
class BenchReport:
    """Every configuration's result, and the machine they ran on.

    Attributes:
        results: one ``ConfigResult`` per configuration, in run order.
        bandwidth: the machine's memory copy bandwidth, bytes/s (``memory_bandwidth``), or 0 when not measured.
        machine: CPU, cores, Python and llama-cpp-python versions.
        reference: the file the quality figures are measured against, or None.
    """

    results: list[ConfigResult]
    bandwidth: float = 0.0
    machine: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"machine": self.machine, "bandwidth_bytes_per_s": self.bandwidth, "reference": self.reference,
                "results": [result.to_dict() for result in self.results]}

    # ------------------------------------------------------------------------------------------ markdown
    def markdown(self) -> str:
        """The report as Markdown: a heading with the machine, then the four tables."""
        lines = [f"# venus-edge bench: {self.machine.get('cpu', platform.machine())}, "
                 f"{self.machine.get('cores', '?')} cores, copy bandwidth {self.bandwidth / 1e9:.1f} GB/s", ""]
        lines += self._speed_table() + [""] + self._anchor_table() + [""] + self._limit_table()
        if any(r.session for r in self.results):
            lines += [""] + self._session_table()
        skipped = sorted({note for r in self.results for note in r.skipped})
        if skipped:
            lines += ["", "Not measured: " + "; ".join(skipped)]
        return "\n".join(lines) + "\n"

    def _speed_table(self) -> list[str]:
        first = self.results[0]
        lengths, depths = list(first.prefill), list(first.decode)
        head = (["model", "type", "KV", "threads", "load s", "weights", "KV cache", "compute", "RSS used", "TTFT s"]
                + [f"prefill@{n}" for n in lengths] + [f"decode@{d}" for d in depths])
        rows = []
        for r in self.results:
            c, m = r.config, r.memory
            rows.append([r.model["name"], r.model.get("file_type") or "?", c["kv_type"], str(c["threads"]),
                         f"{r.load_s:.2f}", format_bytes(m["weights"]), format_bytes(m["kv"]),
                         format_bytes(m["compute"]), format_bytes(m.get("rss_used", 0)), f"{r.ttft_s:.2f}"]
                        + [f"{r.prefill.get(n, 0):.1f}" for n in lengths]
                        + [f"{r.decode.get(d, 0):.1f}" for d in depths])
        return ["Speed (tokens/s) and memory; TTFT: a DR-Venus first turn of "
                f"{first.ttft_prompt_tokens} tokens, no prompt cache", ""] + _table(head, rows)

    def _anchor_table(self) -> list[str]:
        depths = list(self.results[0].decode)
        head = ["model", "KV"] + [f"decode@{d} ours / raw / llama-bench" for d in depths]
        rows = []
        for r in self.results:
            cells = []
            for d in depths:
                ours, raw = r.decode.get(d, 0.0), r.raw_decode.get(d, 0.0)
                bench = (r.llama_bench or {}).get("decode", {}).get(d)
                cell = f"{ours:.1f} / {raw:.1f} ({_ratio(ours, raw)})"
                cell += f" / {bench:.1f} ({_ratio(ours, bench)})" if bench else " / -"
                cells.append(cell)
            rows.append([r.model["name"], r.config["kv_type"], *cells])
        title = "Decode against the anchors, same file and threads (ours / anchor in brackets)"
        return [title, ""] + _table(head, rows)

    def _limit_table(self) -> list[str]:
        depths = list(self.results[0].decode)
        head = ["model", "KV"] + [f"limit@{d}" for d in depths] + [f"of limit@{d}" for d in depths] + \
            ["KL vs ref", "top-1", "ppl ratio"]
        rows = []
        for r in self.results:
            per_token = kv_per_token(Path(r.config["model"]), r.config["kv_type"])
            limits = [bandwidth_limit(self.bandwidth, r.model["weight_bytes"], per_token, d) if self.bandwidth else 0.0
                      for d in depths]
            quality = r.quality or {}
            rows.append([r.model["name"], r.config["kv_type"]] + [f"{limit:.1f}" for limit in limits]
                        + [f"{r.decode.get(d, 0) / limit:.0%}" if limit else "-" for d, limit in zip(depths, limits)]
                        + [f"{quality['mean_kl']:.4f}" if "mean_kl" in quality else "-",
                           f"{quality['top1_agreement']:.3f}" if "top1_agreement" in quality else "-",
                           f"{quality['ppl_ratio']:.3f}" if "ppl_ratio" in quality else "-"])
        return [f"The memory-bandwidth limit (tokens/s = bandwidth / (weights + KV read per token)) and the quality "
                f"against {Path(self.reference).name if self.reference else 'no reference'} (the replayed session's "
                f"question, calls and tool results, or a fixed text without a session)", ""] + \
            _table(head, rows)

    def _session_table(self) -> list[str]:
        head = ["model", "KV", "turns", "total s", "s per turn", "prompt evaluated", "prompt reused", "reused share"]
        rows = []
        for r in self.results:
            s = r.session
            if not s:
                continue
            turns, total = len(s["turns"]), s["evaluated"] + s["reused"]
            rows.append([r.model["name"], r.config["kv_type"], str(turns), f"{s['total_s']:.1f}",
                         f"{s['total_s'] / turns:.2f}", f"{s['evaluated']:,}", f"{s['reused']:,}",
                         f"{s['reused'] / total:.0%}" if total else "-"])
        return ["A recorded agent session replayed (its prompts, the recorded tool results; greedy, each turn as "
                "long as recorded up to 256 tokens)", ""] + _table(head, rows)

    # ------------------------------------------------------------------------------------------ files
    def write(self, out: Path, *, plots: bool = True) -> list[Path]:
        """Write ``report.md``, ``report.json`` and, with matplotlib, ``decode.png`` and ``memory.png`` into
        ``out`` (created); the paths written."""
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "report.md", out / "report.json"]
        written[0].write_text(self.markdown(), encoding="utf-8")
        written[1].write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        if plots:
            written += self._plots(out)
        return written

    def _plots(self, out: Path) -> list[Path]:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:  # the eval extra is not installed
            return []
        figure, axis = plt.subplots(figsize=(7, 4.5))
        for r in self.results:
            depths = list(r.decode)
            axis.plot(depths, [r.decode[d] for d in depths], marker="o",
                      label=f"{r.model['name']} ({r.model.get('file_type')}, KV {r.config['kv_type']})")
            if r.raw_decode:
                axis.plot(depths, [r.raw_decode.get(d, 0) for d in depths], linestyle=":",
                          color=axis.lines[-1].get_color())
        axis.set_xlabel("context depth (tokens)")
        axis.set_ylabel("decode tokens/s (dotted: raw llama-cpp-python)")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
        figure.tight_layout()
        decode_png = out / "decode.png"
        figure.savefig(decode_png, dpi=110)
        plt.close(figure)

        figure, axis = plt.subplots(figsize=(7, 4.5))
        names = [f"{r.model['name']}\nKV {r.config['kv_type']}" for r in self.results]
        bottom = [0.0] * len(self.results)
        for part in ("weights", "kv", "compute"):
            values = [r.memory[part] / 2**20 for r in self.results]
            axis.bar(names, values, bottom=bottom, label={"kv": "KV cache"}.get(part, part))
            bottom = [b + v for b, v in zip(bottom, values)]
        axis.scatter(
            names,
            [r.memory.get("rss_used", 0) / 2**20 for r in self.results],
            color="black",
            zorder=3,
            label="measured RSS growth",
        )
        axis.set_ylabel("MiB")
        axis.tick_params(axis="x", labelsize=7)
        axis.legend(fontsize=7)
        figure.tight_layout()
        memory_png = out / "memory.png"
        figure.savefig(memory_png, dpi=110)
        plt.close(figure)
        return [decode_png, memory_png]


def _ratio(ours: float, anchor: float | None) -> str:
    return f"{ours / anchor:.2f}x" if anchor else "-"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(row) + " |" for row in rows]
