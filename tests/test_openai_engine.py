"""OpenAIEngine against a real llama.cpp server process on 127.0.0.1 (llama-server, built from the vendored
source): the local engine's token ids and text, the same stop rules, prefix reuse across the agent's turns,
concurrent requests, retries on 429/5xx, and a server that dies mid-session."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from venus_edge import protocol
from venus_edge.agent import Agent, AgentConfig
from venus_edge.engines.base import GREEDY, SamplingParams
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.engines.openai import OpenAIEngine
from venus_edge.errors import EngineConnectionError
from venus_edge.events import ErrorRaised
from venus_edge.grammar import GrammarLimits
from venus_edge.testing import LlamaServer
from venus_edge.toolbox import default_tools
from venus_edge.tools.base import ToolResult
from venus_edge.trajectory import read_journal

CHAT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
# The answer forced by a grammar (12 tokens), so that a test's text and its end do not depend on what is sampled.
PARIS = 'root ::= "The capital of France is Paris, on the Seine."'
# Strict turns this short fit in 512 tokens whatever the model writes: a token holds at least one byte, and a
# search call is at most ~410 bytes (64 characters of reasoning, one query of 16, markup; 4 bytes a character).
SHORT_TURNS = GrammarLimits(reasoning_chars=64, string_chars=16, list_items=1, answer_chars=64)
TEXTS = [CHAT, "café — 中文 🚀 <|im_end|> </tool_call>", "    deep    indentation\n\n\n", "<tool_response>\nx\n"
                                                                                       "</tool_response>"]


@pytest.fixture(scope="module")
def engine(llama_server: LlamaServer) -> Iterator[OpenAIEngine]:
    with OpenAIEngine(llama_server.url) as server_engine:
        yield server_engine


@pytest.fixture(scope="module")
def local(smollm2_gguf, real_model_run) -> Iterator[LlamaCppEngine]:
    with LlamaCppEngine(smollm2_gguf, n_ctx=2048, **real_model_run.engine_args()) as local_engine:
        yield local_engine


def test_token_ids_and_text_are_the_local_engines(engine, local):
    assert engine.n_ctx == 8192 // 2, "llama-server splits -c over its slots"
    for text in TEXTS:
        for parse_special in (True, False):
            ids = engine.tokenize(text, parse_special=parse_special)
            assert ids == local.tokenize(text, parse_special=parse_special), (text, parse_special)
            assert engine.detokenize(ids) == local.detokenize(ids) == text


def test_generation_streams_text_token_ids_and_logprobs(engine, local):
    prompt = engine.tokenize(CHAT)
    pieces: list[str] = []
    completion = engine.generate(prompt, sampling=dataclasses.replace(GREEDY, max_tokens=24, logprobs=True),
                                 on_text=pieces.append, grammar=PARIS)
    assert "".join(pieces) == completion.text == "The capital of France is Paris, on the Seine."
    assert local.detokenize(completion.token_ids) == completion.text
    assert len(completion.logprobs) == len(completion.token_ids) and all(lp <= 0 for lp in completion.logprobs)
    assert completion.finish_reason in ("eog", "length")
    short = engine.generate(prompt, sampling=dataclasses.replace(GREEDY, max_tokens=3), grammar=PARIS)
    assert short.finish_reason == "length" and len(short.token_ids) == 3 and short.logprobs is None


def test_the_end_of_generation_token_is_reported_apart_from_the_completion(engine):
    prompt = engine.tokenize(CHAT)
    sampling = dataclasses.replace(GREEDY, max_tokens=40, logprobs=True)
    ended = engine.generate(prompt, sampling=sampling, grammar='root ::= "Paris."')
    assert ended.finish_reason == "eog" and ended.text == "Paris."
    assert ended.end_token == engine.single_token_id("<|im_end|>") and ended.end_token not in ended.token_ids
    assert ended.end_logprob is not None and ended.end_logprob <= 0
    assert engine.generate(prompt, sampling=dataclasses.replace(GREEDY, max_tokens=40),
                           grammar='root ::= "Paris."').end_logprob is None  # no log-probs asked for
    cut = engine.generate(prompt, sampling=dataclasses.replace(sampling, max_tokens=2), grammar=PARIS)
    assert cut.finish_reason == "length" and cut.end_token is None and len(cut.token_ids) == 2


def test_exact_token_ids_list_every_sampled_token_across_split_characters(llama_server, local):
    """llama-server's streamed and OpenAI-form replies leave out the tokens that end inside a UTF-8 character (an
    emoji is several byte tokens in SmolLM2's vocabulary); ``exact_token_ids`` asks for the whole completion with
    its ids, which RL rollouts train on."""
    text = "rocket \U0001f680 and caf\u00e9"
    grammar = 'root ::= "' + text + '"'
    sampling = dataclasses.replace(GREEDY, max_tokens=40, logprobs=True)
    with OpenAIEngine(llama_server.url, exact_token_ids=True) as exact:
        prompt = exact.tokenize(CHAT)
        whole = exact.generate(prompt, sampling=sampling, grammar=grammar)
        assert whole.text == text and local.detokenize(whole.token_ids) == text
        assert whole.finish_reason == "eog" and whole.end_token == exact.single_token_id("<|im_end|>")
        assert whole.stats.tokens_decoded == len(whole.token_ids) + 1
        assert len(whole.logprobs) == len(whole.token_ids)
        assert all(value <= 0 for value in whole.logprobs if value == value)  # NaN: the server sent none
        short = exact.generate(prompt, sampling=dataclasses.replace(sampling, max_tokens=3), grammar=grammar)
        assert short.finish_reason == "length" and len(short.token_ids) == 3 and short.end_token is None
        with pytest.raises(ValueError, match="single tokens only"):  # <tool_response> is text in this vocabulary
            exact.generate(prompt, sampling=sampling, stop=protocol.STOP_STRINGS)


def test_the_stop_rules_are_the_engines_not_the_servers(engine):
    """The server is sent no stop strings (it would match them as text); the engine applies the protocol's rule:
    a mention in the reasoning is text, a hallucinated observation after the action is cut."""
    prompt = engine.tokenize(CHAT)
    rules = dict(sampling=dataclasses.replace(GREEDY, max_tokens=40), stop=protocol.STOP_STRINGS,
                 stop_text_if=protocol.action_complete)
    mention = engine.generate(prompt, grammar='root ::= "I read <tool_response> blocks."', **rules)
    assert mention.text == "I read <tool_response> blocks." and mention.finish_reason == "eog"
    after = engine.generate(prompt, grammar='root ::= "x\\n</think>\\n\\n<answer>\\nB\\n</answer>\\n<tool_response> z"',
                            **rules)
    assert after.text == "x\n</think>\n\n<answer>\nB\n</answer>\n" and after.finish_reason == "stop"


def test_concurrent_requests_use_the_servers_slots(engine, real_model_run):
    prompt = engine.tokenize(CHAT)
    sampling = SamplingParams(max_tokens=16)
    with ThreadPoolExecutor(2) as pool:
        outputs = list(pool.map(lambda seed: engine.generate(prompt, sampling=sampling, grammar=PARIS,
                                                             seed=real_model_run.seed(seed)), (1, 2)))
    assert [o.text for o in outputs] == ["The capital of France is Paris, on the Seine."] * 2


@pytest.mark.slow
def test_an_agent_session_on_the_server_evaluates_each_prompt_token_once(engine, local, docs_corpus, tmp_path):
    """The prefix the server keeps is reused turn after turn: a turn evaluates only the tokens of its prompt that
    differ from what the server holds (the last prompt and the ids it sampled). A turn the loop keeps as sampled is
    held whole; a turn it rewrote (cut at max_tokens, then closed) keeps its sampled ids up to the first changed
    character. Holds for any text the model samples: the expected prefix is computed from the prompts sent."""
    calls: list[tuple[list[int], Any]] = []
    generate = engine.generate

    def recording(prompt_ids, **kwargs):
        completion = generate(prompt_ids, **kwargs)
        calls.append((list(prompt_ids), completion))
        return completion

    config = AgentConfig(strict=True, min_tool_calls=2, max_turns=3, sampling=SamplingParams(max_tokens=200))
    agent = Agent(engine, default_tools([docs_corpus]), config=config, trajectory_path=tmp_path / "t.jsonl")
    engine.generate = recording
    try:
        result = agent.run("When was the tomllib module added to Python?")
    finally:
        del engine.generate
    journal_turns = read_journal(tmp_path / "t.jsonl").trajectories[0].turns
    contents = {tuple(turn.token_ids): turn.content for turn in journal_turns}
    assert len(contents) >= 3, result.termination
    checked = 0
    for (prompt, completion), (following, reply) in itertools.pairwise(calls):
        history = contents.get(tuple(completion.token_ids))
        if history is None:  # a retried attempt: the next prompt is the same one
            continue
        held = prompt + list(completion.token_ids)
        shared = next((i for i, (a, b) in enumerate(zip(held, following)) if a != b), min(len(held), len(following)))
        kept = max(k for k in range(len(completion.token_ids) + 1)
                   if history.startswith(local.detokenize(completion.token_ids[:k])))
        assert shared >= len(prompt) + kept, (shared, len(prompt), kept)
        if history == completion.text:
            assert shared == len(held), "a turn kept as sampled must be held whole"
        evaluated = reply.stats.prompt_tokens_evaluated
        assert 0 < evaluated <= len(following) - shared + 1, (evaluated, len(following), shared)
        checked += 1
    assert checked >= 2


class FlakyProxy:
    """A loopback HTTP proxy in front of the real server that answers the first ``failures`` requests with
    ``status`` (and ``Retry-After: 0``), then forwards everything."""

    def __init__(self, upstream: str, failures: int, status: int = 503) -> None:
        state = {"left": failures}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if state["left"] > 0:
                    state["left"] -= 1
                    self.send_response(status)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                reply = httpx.request(method, upstream + self.path, content=body,
                                      headers={"content-type": "application/json"}, timeout=60)
                self.send_response(reply.status_code)
                self.send_header("Content-Type", reply.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.state = state
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status", [429, 500, 503])
def test_429_and_5xx_are_retried_with_backoff(llama_server, status):
    proxy = FlakyProxy(llama_server.url, failures=3, status=status)
    try:
        with OpenAIEngine(proxy.url, backoff_s=0.01) as engine:
            assert engine.n_ctx == 4096 and proxy.state["left"] == 0
            assert engine.tokenize("hello") == engine.tokenize("hello")
    finally:
        proxy.close()


def test_a_server_that_keeps_failing_is_a_typed_error(llama_server):
    proxy = FlakyProxy(llama_server.url, failures=100)
    try:
        with pytest.raises(EngineConnectionError, match=r"no answer after 3 attempt.*HTTP 503"):
            OpenAIEngine(proxy.url, max_retries=3, backoff_s=0.01)
    finally:
        proxy.close()
    with pytest.raises(EngineConnectionError, match="ConnectError"):
        OpenAIEngine("http://127.0.0.1:9", max_retries=2, backoff_s=0.01)


class KillServer:
    """A search tool that kills the model server when it is called: the next turn has no server."""

    name = "search"
    schema: ClassVar[dict[str, Any]] = {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {
        "query": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}}}

    def __init__(self, server: LlamaServer) -> None:
        self.server = server

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        self.server.stop()
        return ToolResult("results")


def test_a_server_that_dies_mid_session_ends_it_with_its_journal_whole(smollm2_gguf, tmp_path, real_model_run):
    server = LlamaServer(smollm2_gguf, slots=1, n_ctx=4096, **real_model_run.thread_args())
    try:
        engine = OpenAIEngine(server.url, max_retries=2, backoff_s=0.01)
        config = AgentConfig(strict=True, min_tool_calls=1, max_turns=3, sampling=SamplingParams(max_tokens=512),
                             grammar_limits=SHORT_TURNS, seed=real_model_run.seed(0))
        agent = Agent(engine, [KillServer(server)], config=config, trajectory_path=tmp_path / "t.jsonl")
        events = list(_events(agent.events("What is the capital of France?")))
    finally:
        server.stop()
    errors = [e for e in events if isinstance(e, ErrorRaised)]
    assert errors and errors[-1].where == "engine" and "EngineConnectionError" in errors[-1].message
    journal = read_journal(tmp_path / "t.jsonl")
    [session] = journal.trajectories
    assert not journal.skipped and session.termination == "llm_error"
    assert session.turns[0].tool_call["name"] == "search", "the turn before the crash is kept"


def _events(stream: Any) -> Iterator[Any]:
    while True:
        try:
            yield next(stream)
        except StopIteration:
            return


def test_research_and_eval_run_on_the_server_from_the_cli(llama_server, docs_corpus, tmp_path, capsys,
                                                          real_model_run):
    from venus_edge.cli import main
    from venus_edge.eval.runner import RESULTS_FILE, read_rows

    # 1,200 new tokens a turn: no strict turn is cut (tests/test_research.py), so none is sampled again and again
    common = ["--engine", "openai", "--base-url", llama_server.url, "--corpus", str(docs_corpus), "--strict",
              "--min-tool-calls", "1", "--max-turns", "1", "--max-tokens", "1200", "--quiet",
              "--seed", str(real_model_run.seed(0))]
    code = main(["research", "When was tomllib added?", *common, "--out", str(tmp_path / "r.jsonl")])
    assert code in (0, 1), capsys.readouterr().err
    [session] = read_journal(tmp_path / "r.jsonl").trajectories
    assert session.header["model"]["server"] == llama_server.url
    assert main(["eval", "pydocs", "--limit", "1", "--k", "2", "--parallel", *common, "--no-plot",
                 "--out", str(tmp_path / "eval")]) == 0
    assert sorted(r.sample for r in read_rows(tmp_path / "eval" / RESULTS_FILE)) == [0, 1]
