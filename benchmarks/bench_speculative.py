"""Time to answer with and without speculative decoding: a recorded research session replayed greedily on one GGUF,
every variant producing the same turns, beside llama.cpp's own ``llama-server`` with its speculative options.

    .venv/bin/python benchmarks/bench_speculative.py --model TARGET.gguf --draft-model DRAFT.gguf [--threads 2]
        [--journal FILE] [--out DIR] [--gpu-layers N]

``--gpu-layers -1`` runs every variant on the GPU (a llama.cpp built with one; ``scripts/gpu_speculative.sh``).

``bash scripts/bench_models.sh`` assembles Qwen2.5-Coder-1.5B (target) and 0.5B (draft) Q4_K_M. Measured, in this
order, in one process (every llama.cpp call on one thread: OpenMP keeps one thread team per calling thread):

1. the verification-cost curve of this machine: seconds of one ``llama_decode`` of k tokens with logits at every
   position over one token, k = 1..16 (median of repeats, at a depth of 1,000 tokens);
2. the session (``venus_edge.bench.measure.replay_session``; the shipped one by default) for each variant: raw
   llama-cpp-python (``Llama.generate`` per turn, its prefix reuse), ours plain (default settings), ours plain
   with batch-invariant numerics (what drafting runs on), ours + lookup, ours + draft model, and llama-server
   plain, with ``ngram-simple`` and with the draft model; wall time, decode and prefill tokens/s, drafted and
   accepted tokens, tokens per verification step; the turns' text must be the same in every variant of ours;
3. the visit extractor alone: ``complete`` over the session's tool results, plain and with lookup;
4. a model (not a measurement) of the speedup on a memory-bound device: with acceptance measured at a fixed draft
   length k and a verification cost of 1 + k * epsilon single tokens, speedup = tokens per step / (1 + k * epsilon).

Writes ``speculative.json`` and ``speculative.md`` in ``--out`` (default ``bench-speculative/``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import llama_cpp

from venus_edge.bench.measure import load_session, replay_session, shipped_session_path
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.trajectory import Trajectory

N_CTX = 8192
CURVE_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)


def verification_curve(engine: LlamaCppEngine, repeats: int = 7) -> dict[int, float]:
    """Seconds of a k-token decode with all logits / one token's, at a depth of 1,000 tokens (module docstring)."""
    context = engine._context

    def measure() -> dict[int, float]:
        context.truncate(0)
        context.evaluate(list(range(1000, 2000)))
        seconds: dict[int, float] = {}
        for k in CURVE_SIZES:
            times = []
            for _ in range(repeats):
                times.append(context.evaluate(list(range(300, 300 + k)), all_logits=True))
                context.truncate(1000)
            seconds[k] = statistics.median(times)
        context.truncate(0)
        return {k: seconds[k] / seconds[1] for k in CURVE_SIZES}

    return engine._on_decode_thread(measure)


def replay(engine: Any, session: Trajectory) -> dict[str, Any]:
    """``replay_session`` with each turn's decoded text (the variants of ours must agree on it)."""
    return replay_session(engine, session, keep_texts=True)


class RawReplay:
    """Raw llama-cpp-python as an ``Engine`` enough for ``replay``: ``Llama.generate`` per turn (its prefix reuse)."""

    def __init__(self, model: Path, threads: int, gpu_layers: int = 0) -> None:
        self.llm = llama_cpp.Llama(str(model), n_ctx=N_CTX, n_threads=threads, n_threads_batch=threads, verbose=False,
                                   n_gpu_layers=gpu_layers)
        self.n_ctx = N_CTX

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        return list(self.llm.tokenize(text.encode(), add_bos=False, special=parse_special))

    def generate(self, prompt: list[int], *, sampling: Any) -> Any:
        from venus_edge.engines.base import Completion, GenerationStats

        start = time.perf_counter()
        first, tokens = start, []
        for token in self.llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
            if not tokens:
                first = time.perf_counter()
            if llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, token):
                break
            tokens.append(token)
            if len(tokens) >= sampling.max_tokens:
                break
        end = time.perf_counter()
        stats = GenerationStats(len(prompt), len(prompt), 0, len(tokens) + 1, first - start, end - first)
        return Completion(self.llm.detokenize(tokens).decode("utf-8", "replace"), tokens, "length", None, stats)


def server_replay(model: Path, threads: int, session: Trajectory, extra: list[str]) -> dict[str, Any]:
    """The session against llama.cpp's own llama-server (``extra``: its speculative options)."""
    from venus_edge.engines.openai import OpenAIEngine
    from venus_edge.testing import LlamaServer

    server = LlamaServer(model, slots=1, n_ctx=N_CTX, n_threads=threads, extra_args=extra)
    try:
        with OpenAIEngine(server.url) as engine:
            return replay(engine, session)
    finally:
        server.stop()


def visit_replay(engine: LlamaCppEngine, session: Trajectory) -> dict[str, Any]:
    """The extractor alone: quote the sentences of each tool result that answer the question."""
    question = next(m["content"] for m in session.messages if m["role"] == "user")
    start, texts = time.perf_counter(), []
    for message in session.messages:
        if message["role"] == "user" and "<tool_response>" in message["content"]:
            page = message["content"][:6000]
            texts.append(engine.complete([{"role": "user", "content": f"Question: {question}\nPage:\n{page}\n"
                                           "Quote the sentences of the page that answer the question."}],
                                         max_tokens=128))
    return {"wall_s": round(time.perf_counter() - start, 3), "texts": texts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--draft-model", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--journal", type=Path, default=shipped_session_path())
    parser.add_argument("--out", type=Path, default=Path("bench-speculative"))
    parser.add_argument("--no-server", action="store_true", help="leave out llama-server")
    parser.add_argument("--turns", type=int, default=0, help="replay the first N assistant turns only (0: all)")
    parser.add_argument("--gpu-layers", type=int, default=0, help="layers on the GPU, every variant (-1: all)")
    args = parser.parse_args()
    session = load_session(args.journal)
    if args.turns:
        ends = [i for i, m in enumerate(session.messages) if m["role"] == "assistant"]
        if len(ends) > args.turns:
            session = replace(session, messages=session.messages[: ends[args.turns - 1] + 1])
    report: dict[str, Any] = {"model": str(args.model), "draft_model": str(args.draft_model), "threads": args.threads,
                              "gpu_layers": args.gpu_layers}
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (args.out / "speculative.json").write_text(json.dumps(report, indent=2))

    def variant(name: str, make: Callable[[], LlamaCppEngine], *, curve: bool = False, visit: bool = False) -> None:
        print(f"{name} ...", flush=True)
        with make() as engine:
            if curve:
                report["verification_cost"] = verification_curve(engine)
            report.setdefault("session", {})[name] = replay(engine, session)
            if visit:
                report.setdefault("visit", {})[name] = visit_replay(engine, session)
            speculation = engine._speculation[1]
            if speculation is not None:
                report["session"][name]["draft_length"] = speculation.summary()
        save()

    base = {"n_ctx": N_CTX, "n_threads": args.threads, "helper_n_ctx": 8192, "gpu_layers": args.gpu_layers}
    variant("ours plain", lambda: LlamaCppEngine(args.model, **base))
    variant("ours plain, batch-invariant", lambda: LlamaCppEngine(args.model, batch_invariant=True, **base),
            curve=True, visit=True)
    variant("ours + lookup", lambda: LlamaCppEngine(args.model, draft="lookup", **base), visit=True)
    variant("ours + lookup, k=4", lambda: LlamaCppEngine(args.model, draft="lookup", draft_tokens=4, **base))
    if args.draft_model:
        variant("ours + draft model", lambda: LlamaCppEngine(args.model, draft=args.draft_model, **base))
        variant("ours + draft model, k=4",
                lambda: LlamaCppEngine(args.model, draft=args.draft_model, draft_tokens=4, **base))
    with LlamaCppEngine(args.model, **base) as host:  # raw on the same decode thread as ours (one OpenMP team)
        print("raw llama-cpp-python ...", flush=True)
        raw = host._on_decode_thread(RawReplay, args.model, args.threads, args.gpu_layers)
        report["session"]["raw llama-cpp-python"] = host._on_decode_thread(replay, raw, session)
        host._on_decode_thread(raw.llm.close)
    save()
    if not args.no_server:
        servers = {"llama-server plain": [], "llama-server ngram-simple": ["--spec-type", "ngram-simple"]}
        if args.draft_model:
            servers["llama-server draft model"] = ["-md", str(args.draft_model), "--spec-type", "draft-simple"]
        # llama-server's own spelling: -1 is "auto" there and "all" is all; 0 is given too (its default is auto)
        layers = "all" if args.gpu_layers == -1 else str(args.gpu_layers)
        servers = {name: [*extra, "-ngl", layers, *(["-ngld", layers] if "-md" in extra else [])]
                   for name, extra in servers.items()}
        for name, extra in servers.items():
            print(f"{name} ...", flush=True)
            try:
                report["session"][name] = server_replay(args.model, args.threads, session, extra)
            except (RuntimeError, FileNotFoundError) as exc:
                report["session"][name] = {"error": str(exc)[:300]}
            save()
    write_markdown(report, args.out / "speculative.md")
    print((args.out / "speculative.md").read_text())


def write_markdown(report: dict[str, Any], path: Path) -> None:
    sessions = report["session"]
    plain = sessions["ours plain, batch-invariant"]
    ours_texts = {name: s.get("texts") for name, s in sessions.items() if name.startswith("ours")}
    same = all(texts == plain["texts"] for texts in ours_texts.values())
    where = f", {report['gpu_layers']} layers on the GPU" if report.get("gpu_layers") else ""
    lines = [f"# Time to answer: {Path(report['model']).name}, draft {Path(report['draft_model']).name}, "
             f"{report['threads']} threads{where}", "",
             f"Greedy turns the same in every variant of ours: {'yes' if same else 'NO'}", "",
             "| variant | wall s | / ours plain (b-i) | decode tok/s | prefill tok/s | drafted | accepted | "
             "tokens/step |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in sessions.items():
        if "error" in s:
            lines.append(f"| {name} | failed: {s['error'][:80]} | | | | | | |")
            continue
        lines.append(f"| {name} | {s['wall_s']:.2f} | {s['wall_s'] / plain['wall_s']:.2f} | {s['decode_tok_s']} | "
                     f"{s['prefill_tok_s']} | {s['drafted']} | {s['accepted']} | {s['tokens_per_step'] or ''} |")
    curve = report.get("verification_cost", {})
    lines += ["", "Verification cost (k tokens with all logits / one token): "
              + ", ".join(f"{k}: {v:.2f}" for k, v in curve.items())]
    fixed = sessions.get("ours + lookup, k=4")
    if fixed and fixed.get("tokens_per_step"):
        lines += ["", "Modeled speedup on a memory-bound device (verifying k=4 costs 1 + 4 eps single tokens; "
                  f"measured {fixed['tokens_per_step']} tokens per step with lookup):"]
        for eps in (0.02, 0.05, 0.1):
            lines.append(f"- eps {eps}: {fixed['tokens_per_step'] / (1 + 4 * eps):.2f}x")
        measured = {int(k): v for k, v in curve.items()}.get(4)
        if measured:  # this machine's own cost of verifying 4 tokens instead of the eps model
            lines.append(f"- this machine's verification cost at k=4 ({measured:.2f}): "
                         f"{fixed['tokens_per_step'] / measured:.2f}x")
    visit = report.get("visit", {})
    if visit:
        same_visit = len({json.dumps(v["texts"]) for v in visit.values()}) == 1
        lines += ["", "Visit extractor alone: " + ", ".join(f"{n} {v['wall_s']:.2f} s" for n, v in visit.items())
                  + (" (same text)" if same_visit else " (TEXT DIFFERS)")]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
