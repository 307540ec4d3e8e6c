"""Long sessions: each context policy against a naive baseline, on one recorded 50-turn research session.

    .venv/bin/python -m pytest benchmarks/bench_context.py --benchmark-only -s

The session: a teacher-forced researcher searches 50 distinct Python topics in the real Python docs (Debian's
python3-doc, 40 pages, the real corpus search tool, 3 results per query) and then answers. Its turns are fixed text,
so every configuration sees the same session; the model is real (SmolLM2-135M on llama.cpp, n_ctx 3072): each turn's
prompt is prefilled for real, with whatever KV-cache prefix survives, and one token is decoded (the turn's own
tokens are then evaluated as part of the next prompt). Prompt tokens evaluated come from llama.cpp's own counter
(``llama_perf_context``), so ours and the baseline are counted the same way.

The baseline is what an app gets from llama-cpp-python alone: the chat re-rendered each turn through
``Llama.create_chat_completion`` and, when it no longer fits the budget, the oldest turn and its result dropped
(a sliding window). Every turn after the window starts sliding edits the prompt's beginning, so the whole prompt is
evaluated again; the policies edit only at the budget, all at once.

Each configuration runs in its own process (peak RSS is per process). Printed: turns, prompt tokens evaluated, wall
time, peak RSS, and the ratio of prompt tokens evaluated against the baseline. About 15 minutes on 2 cores, most
of it the baseline.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

N_CTX, RESERVE, TURNS, RESULTS_PER_SEARCH = 3_072, 300, 50, 3
PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
TOPICS = [
    "tomllib", "pickle protocol", "json dumps", "datetime timezone", "os.path join", "pathlib glob", "asyncio tasks",
    "dataclasses field", "typing generics", "zipfile extract", "csv reader", "sqlite3 cursor", "logging handlers",
    "argparse subparsers", "functools cache", "itertools groupby", "collections deque", "re named groups",
    "subprocess run", "threading lock", "unittest mock", "enum auto", "contextlib suppress", "shutil copytree",
    "tempfile directory", "hashlib sha256", "random seed", "statistics median", "decimal precision", "fractions",
    "math isclose", "heapq merge", "bisect insort", "struct pack", "socket timeout", "ssl context", "urllib parse",
    "http server", "email message", "base64 encode", "gzip open", "tarfile add", "configparser sections",
    "secrets token", "uuid4", "time monotonic", "calendar month", "locale format", "gettext", "string template",
    "textwrap dedent", "difflib ratio", "pprint width", "copy deepcopy", "weakref finalize", "gc collect",
    "inspect signature", "dis bytecode", "ast parse", "tokenize module", "venv create",
][:TURNS]
PAGES = ["library/" + name for name in (
    "tomllib", "pickle", "json", "datetime", "os.path", "pathlib", "asyncio-task", "dataclasses", "typing", "zipfile",
    "csv", "sqlite3", "logging.handlers", "argparse", "functools", "itertools", "collections", "re", "subprocess",
    "threading", "unittest.mock", "enum", "contextlib", "shutil", "tempfile", "hashlib", "random", "statistics",
    "decimal", "fractions", "math", "heapq", "bisect", "struct", "socket", "ssl", "urllib.parse", "http.server",
    "email.message", "base64")]
CONFIGS = ["naive-sliding-window", "force-answer", "keep-last-k", "summarize"]
RESULTS: dict[str, dict] = {}


def researcher(prompt: str) -> str:
    """The recorded session's model: the next topic not searched yet (by the conversation or by its notes)."""
    from venus_edge import protocol
    from venus_edge.testing import answer_turn, tool_call_turn

    last = prompt.rsplit(protocol.IM_START, 2)[-2]
    if protocol.CONTEXT_LIMIT_NOTICE in last or protocol.STEP_LIMIT_NOTICE in last:
        return answer_turn("what I found")
    if protocol.SUMMARY_NOTICE in last:
        return answer_turn("searched: " + "; ".join(t for t in TOPICS if f'"query": ["{t}"]' in prompt
                                                    or _noted(prompt, t)))
    todo = [t for t in TOPICS if f'"query": ["{t}"]' not in prompt and not _noted(prompt, t)]
    return tool_call_turn("search", query=[todo[0]]) if todo else answer_turn("all topics read")


def _noted(prompt: str, topic: str) -> bool:
    notes = prompt.split("searched: ", 1)[1].split("\n")[0] if "searched: " in prompt else ""
    return topic in notes.split("; ")


class TeacherForcedEngine:
    """A real ``LlamaCppEngine`` whose turns are the researcher's: the prompt is prefilled for real (KV reuse and
    all) and one token decoded; the returned text is the recorded turn."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.n_ctx = engine.n_ctx
        self.tokenize, self.detokenize, self.model_info = engine.tokenize, engine.detokenize, engine.model_info

    def generate(self, prompt_ids, *, sampling, stop=(), stop_text_if=None, grammar=None, on_text=None, seed=None):
        from dataclasses import replace

        from venus_edge.engines.base import GREEDY

        real = self.engine.generate(prompt_ids, sampling=replace(GREEDY, max_tokens=1))
        text = researcher(self.engine.detokenize(prompt_ids))
        return replace(real, text=text, token_ids=self.engine.tokenize(text), finish_reason="stop")


def _corpus(folder: Path) -> Path:
    for page in PAGES:
        target = folder / "pydocs" / f"{page}.html"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PYTHON_DOCS / f"{page}.html", target)
    return folder / "pydocs"


def _evaluated(llm) -> int:
    import llama_cpp

    return int(llama_cpp.llama_perf_context(llm._ctx.ctx).n_p_eval)


def run_config(name: str, corpus: Path) -> dict:
    """One configuration in this process: turns made, prompt tokens evaluated, seconds, peak RSS in MiB."""
    from venus_edge.agent import Agent, AgentConfig
    from venus_edge.engines.llama_cpp import LlamaCppEngine
    from venus_edge.testing import smollm2_path
    from venus_edge.toolbox import default_tools

    tools = default_tools([corpus], search_results=RESULTS_PER_SEARCH)
    with LlamaCppEngine(smollm2_path(), n_ctx=N_CTX, seed=0) as engine:
        start = time.perf_counter()
        if name == "naive-sliding-window":
            turns = _naive(engine, tools)
        else:
            config = AgentConfig(max_turns=TURNS + 5, answer_reserve_tokens=RESERVE, context_policy=name,
                                 keep_last=1, max_summaries=20)
            result = Agent(TeacherForcedEngine(engine), tools, config=config).run("Tell me about these modules.")
            turns = result.turns
        seconds = time.perf_counter() - start
        evaluated = _evaluated(engine._llm)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"config": name, "turns": turns, "prompt_tokens_evaluated": evaluated, "seconds": round(seconds, 1),
            "peak_rss_mib": round(peak)}


def _naive(engine, tools) -> int:
    """The chat through ``create_chat_completion``, oldest turn dropped while the prompt is over the budget."""
    from datetime import date

    from venus_edge import protocol
    from venus_edge.engines.llama_cpp import off_main_thread

    llm = engine._llm
    registry = {tool.name: tool for tool in tools}
    system = protocol.render_system_prompt([t.schema for t in tools], date.today())
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Tell me about these modules."}]
    turns = 0
    while turns < TURNS + 5:
        while len(llm.tokenize(protocol.render_messages(messages).encode(), special=True)) > N_CTX - RESERVE:
            del messages[2:4]
        off_main_thread(lambda: llm.create_chat_completion(messages, max_tokens=1, temperature=0.0))
        text = researcher(protocol.render_messages(messages))
        turns += 1
        parsed = protocol.parse_turn(protocol.assistant_content(text), list(registry))
        messages.append({"role": "assistant", "content": text})
        if parsed.kind == "answer":
            break
        call = parsed.tool_call
        messages.append({"role": "user", "content": protocol.observation(registry[call.name](call.arguments).text)})
    return turns


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not PYTHON_DOCS.is_dir():
        pytest.skip("needs Debian's python3.11-doc (scripts/setup.sh installs it)")
    return _corpus(tmp_path_factory.mktemp("bench-context"))


@pytest.mark.timeout(3_600)
@pytest.mark.parametrize("name", CONFIGS)
def test_policy_against_the_naive_sliding_window(benchmark, corpus, name):
    def measure() -> dict:
        out = subprocess.run([sys.executable, __file__, name, str(corpus)], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    RESULTS[name] = benchmark.pedantic(measure, rounds=1, iterations=1)
    print(f"\n{json.dumps(RESULTS[name])}")
    if len(RESULTS) == len(CONFIGS):
        base = RESULTS["naive-sliding-window"]["prompt_tokens_evaluated"]
        print("\n| config | turns | prompt tokens evaluated | vs naive | wall s | peak RSS MiB |")
        print("|---|---|---|---|---|---|")
        for config in CONFIGS:
            r = RESULTS[config]
            print(f"| {config} | {r['turns']} | {r['prompt_tokens_evaluated']:,} | "
                  f"{r['prompt_tokens_evaluated'] / base:.2f}x | {r['seconds']} | {r['peak_rss_mib']} |")
    assert RESULTS[name]["turns"] >= 1


if __name__ == "__main__":
    print(json.dumps(run_config(sys.argv[1], Path(sys.argv[2]))))
