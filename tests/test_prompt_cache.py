"""The persistent prompt cache (``venus_edge.engines.prompt_cache``) with real llama.cpp, SmolLM2 and real files.

A new ``LlamaCppEngine`` object starts with an empty KV cache, as a new process does; each test makes engines on
one cache folder under ``tmp_path`` and reads the reuse figures that ``generate`` reports. The engines run one
thread (or ``VENUS_TEST_THREADS``, see conftest): the prompts are short, and a single thread does not slow down when
other work shares the cores.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from venus_edge import protocol
from venus_edge.engines.base import GREEDY, Completion
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.engines.prompt_cache import default_prompt_cache_dir, stable_prefix_length
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA

N_CTX = 1024
SAMPLING = replace(GREEDY, max_tokens=8)
# Short schemas keep each first turn cheap; the boundary test below uses the real ones.
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search the web.", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
VISIT = {"type": "function", "function": {"name": "visit", "description": "Read a web page.", "parameters": {
    "type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}}
TOOLS = [SEARCH, VISIT]
QUESTION = "When was tomllib added to the Python standard library?"


def _prompt(tokenize: Callable[[str], list[int]], tools: Sequence[dict[str, Any]] = TOOLS,
            today: str = "2026-03-01", question: str = QUESTION) -> list[int]:
    """The token ids of a session's first turn: the DR-Venus system prompt, the question, the generation prompt."""
    system = protocol.render_system_prompt(tools, today)
    return tokenize(protocol.render_messages([{"role": "system", "content": system},
                                              {"role": "user", "content": question}]))


def _generate(model: Path, cache: Path | None, ids: list[int], threads: int,
              **engine_kwargs: Any) -> tuple[Completion, Any]:
    """One first turn on a new engine (an empty KV cache); the completion and the cache's counts."""
    with LlamaCppEngine(model, n_ctx=N_CTX, n_threads=threads, prompt_cache_dir=cache, **engine_kwargs) as engine:
        completion = engine.generate(ids, sampling=SAMPLING)
        return completion, engine.prompt_cache.counts if engine.prompt_cache else None


def _files(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.kvstate"))


@pytest.fixture(scope="module")
def threads(real_model_run: Any) -> int:
    """One thread unless the run names others (conftest's ``VENUS_TEST_THREADS``)."""
    return real_model_run.n_threads or 1


@pytest.fixture(scope="module")
def tokenize(smollm2_engine: LlamaCppEngine) -> Callable[[str], list[int]]:
    return smollm2_engine.tokenize


@pytest.fixture(scope="module")
def prompt(tokenize: Callable[[str], list[int]]) -> list[int]:
    return _prompt(tokenize)


@pytest.fixture(scope="module")
def stable(prompt: list[int], smollm2_engine: LlamaCppEngine) -> int:
    return stable_prefix_length(prompt, smollm2_engine.token_bytes)


@pytest.fixture(scope="module")
def uncached(smollm2_gguf: Path, prompt: list[int], threads: int) -> Completion:
    """The reference: the same first turn without a prompt cache."""
    return _generate(smollm2_gguf, None, prompt, threads)[0]


@pytest.fixture(scope="module")
def first_session(smollm2_gguf: Path, prompt: list[int], tmp_path_factory: pytest.TempPathFactory,
                  threads: int) -> Path:
    """A cache folder in which a first session saved the prefix of ``prompt``."""
    cache = tmp_path_factory.mktemp("first-session") / "prompt-cache"
    _generate(smollm2_gguf, cache, prompt, threads)
    return cache


@pytest.fixture
def seeded(first_session: Path, tmp_path: Path) -> Path:
    """A copy of ``first_session``'s folder for one test."""
    return Path(shutil.copytree(first_session, tmp_path / "prompt-cache"))


# ---------------------------------------------------------------------------------------------- the boundary
def _pieces_length(*pieces: bytes) -> int:
    return stable_prefix_length(range(len(pieces)), pieces.__getitem__)


def test_the_stable_prefix_ends_at_the_last_token_wholly_before_the_date_line():
    """Tokens may straddle the start of the date line; such a token and all after it stay out."""
    assert _pieces_length(b"<|im_start|>", b"system\nTools.", b"\n\n", b"Current", b" date: 2026-03-01",
                          b"\n", b"<|im_end|>") == 3
    assert _pieces_length(b"<|im_start|>", b"system\nTools.\n", b"\nCur", b"rent date: 2026-03-01\n") == 2
    assert _pieces_length(b"<|im_start|>", b"system\nTools.", b"\n\nCurrent", b" date: 2026-03-01\n") == 2
    assert _pieces_length(b"<|im_start|>", b"system\nTools.", b"\n", b"\n", b"Current date: 2026-03-01\n") == 4


def test_no_stable_prefix_without_a_date_line_in_the_first_message():
    assert _pieces_length(b"<|im_start|>", b"user\nhi", b"<|im_end|>", b"\nCurrent date: 2026-03-01\n") == 0
    assert _pieces_length(b"<|im_start|>", b"user\nCurrent dates matter") == 0
    assert _pieces_length() == 0


def test_the_stable_prefix_of_a_real_prompt_is_the_longest_before_the_date_line(tokenize, smollm2_engine):
    """DR-Venus's system prompt with its real search and visit schemas."""
    tools = [SEARCH_SCHEMA, VISIT_SCHEMA]
    prompt = _prompt(tokenize, tools=tools)
    stable = stable_prefix_length(prompt, smollm2_engine.token_bytes)
    text_before = protocol.render_messages([{"role": "system", "content": protocol.render_system_prompt(
        tools, "2026-03-01")}]).split(protocol.DATE_LINE_PREFIX)[0]
    prefix_text = smollm2_engine.detokenize(prompt[:stable])
    one_more = smollm2_engine.detokenize(prompt[: stable + 1])
    assert stable > 400, stable
    assert text_before.startswith(prefix_text), prefix_text[-20:]
    assert not text_before.startswith(one_more), one_more[-20:]


# ---------------------------------------------------------------------------------------------- restore
def test_a_second_engine_restores_the_prefix_and_writes_the_same_text(smollm2_gguf, prompt, stable, uncached, tmp_path,
                                                                      threads):
    """The first engine evaluates everything and saves the prefix; a second one restores it, reports those
    tokens as reused, evaluates only the rest, and its greedy text equals the text without a cache."""
    cache = tmp_path / "prompt-cache"
    first, first_counts = _generate(smollm2_gguf, cache, prompt, threads)
    assert (first.stats.prompt_tokens_reused, first_counts.saves) == (0, 1), (first.stats, first_counts)
    assert len(_files(cache)) == 1

    second, counts = _generate(smollm2_gguf, cache, prompt, threads)
    assert (counts.restores, counts.restored_tokens, counts.saves) == (1, stable, 0), counts
    assert second.stats.prompt_tokens_reused == stable, second.stats
    assert second.stats.prompt_tokens_evaluated == len(prompt) - stable, second.stats
    assert first.text == uncached.text and second.text == uncached.text, (first.text, second.text, uncached.text)


def test_the_next_turn_of_a_restored_session_reuses_the_kv_cache_without_the_disk(smollm2_gguf, seeded, prompt, stable,
                                                                                   threads):
    with LlamaCppEngine(smollm2_gguf, n_ctx=N_CTX, n_threads=threads, prompt_cache_dir=seeded) as engine:
        first = engine.generate(prompt, sampling=SAMPLING)
        longer = prompt + first.token_ids + engine.tokenize("<|im_end|>\n<|im_start|>user\nAnd json?<|im_end|>\n")
        second = engine.generate(longer, sampling=SAMPLING)
        assert engine.prompt_cache.counts.restores == 1, engine.prompt_cache.counts
    assert second.stats.prompt_tokens_reused >= len(prompt), second.stats


def test_a_new_date_reuses_everything_before_the_date_line(smollm2_gguf, seeded, tokenize, stable, threads):
    ids = _prompt(tokenize, today="2027-12-31", question="Which pickle protocol is the default?")
    completion, counts = _generate(smollm2_gguf, seeded, ids, threads)
    assert completion.stats.prompt_tokens_reused == stable, completion.stats
    assert counts.saves == 0 and len(_files(seeded)) == 1, counts


def test_another_system_prompt_does_not_reuse(smollm2_gguf, seeded, tokenize, threads):
    ids = _prompt(tokenize, tools=[SEARCH])
    completion, counts = _generate(smollm2_gguf, seeded, ids, threads)
    assert completion.stats.prompt_tokens_reused == 0, completion.stats
    assert (counts.restores, counts.saves) == (0, 1) and len(_files(seeded)) == 2, counts


def test_another_kv_type_does_not_reuse(smollm2_gguf, seeded, prompt, stable, threads):
    completion, counts = _generate(smollm2_gguf, seeded, prompt, threads, kv_cache_f32=True)
    assert completion.stats.prompt_tokens_reused == 0, completion.stats
    assert counts.saves == 1 and len(_files(seeded)) == 2, counts
    again, _ = _generate(smollm2_gguf, seeded, prompt, threads, kv_cache_f32=True)
    assert again.stats.prompt_tokens_reused == stable, again.stats


def test_kv_values_computed_another_way_are_not_reused(smollm2_gguf, seeded, prompt, stable, threads, monkeypatch):
    """The first session ran llama.cpp's repacked CPU weights. Weights in the GGUF's own layout (``batch_invariant``,
    as drafting loads them) or layers on the GPU sum in another order: a state from there would restore, but a
    session would not write the text it writes without the cache. Each saves its own prefix and reuses that."""
    import llama_cpp

    for kwargs in ({"batch_invariant": True}, {"gpu_layers": 3}):
        if "gpu_layers" in kwargs:  # as a CUDA build answers; this CPU build keeps the layers on the CPU
            monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: True)
        completion, counts = _generate(smollm2_gguf, seeded, prompt, threads, **kwargs)
        assert completion.stats.prompt_tokens_reused == 0 and counts.saves == 1, (kwargs, completion.stats, counts)
        again, _ = _generate(smollm2_gguf, seeded, prompt, threads, **kwargs)
        assert again.stats.prompt_tokens_reused == stable, (kwargs, again.stats)
    assert len(_files(seeded)) == 3


def test_another_model_file_does_not_reuse(smollm2_gguf, seeded, prompt, tmp_path, threads):
    """A copy is another file (path, mtime): the key never matches a file it was not made with."""
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(smollm2_gguf, copy)
    completion, counts = _generate(copy, seeded, prompt, threads)
    assert completion.stats.prompt_tokens_reused == 0, completion.stats
    os.utime(copy, ns=(1, 1))  # the same file touched: its own saved prefix no longer matches either
    touched, counts = _generate(copy, seeded, prompt, threads)
    assert touched.stats.prompt_tokens_reused == 0 and counts.saves == 1, (touched.stats, counts)


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _garbage_header(data: bytes) -> bytes:
    return data[:12] + b"\xff" * 16 + data[28:]


@pytest.mark.parametrize("damage", [_truncate, _flip_last_byte, _garbage_header, lambda data: b""],
                         ids=["truncated", "flipped", "garbage-header", "empty"])
def test_a_damaged_file_is_ignored_and_replaced(damage, smollm2_gguf, seeded, prompt, stable, uncached, caplog,
                                                threads):
    (path,) = _files(seeded)
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="venus_edge.engines.prompt_cache"):
        completion, counts = _generate(smollm2_gguf, seeded, prompt, threads)
    assert completion.stats.prompt_tokens_reused == 0 and completion.text == uncached.text, completion
    assert (counts.rejected, counts.saves) == (1, 1), counts
    assert any("ignoring" in record.getMessage() and str(path) in record.getMessage() for record in caplog.records)
    assert _files(seeded) == [path]
    rebuilt, _ = _generate(smollm2_gguf, seeded, prompt, threads)
    assert rebuilt.stats.prompt_tokens_reused == stable, rebuilt.stats


# ---------------------------------------------------------------------------------------------- the folder
def test_the_folder_keeps_the_most_recently_used_files(smollm2_gguf, tokenize, tmp_path, threads):
    """Three system prompts on one engine with max_files 2: the oldest file goes; a state over max_bytes is
    not written at all."""
    cache = tmp_path / "prompt-cache"
    prompts = [_prompt(tokenize, tools=tools) for tools in ([SEARCH], [VISIT], TOOLS)]
    with LlamaCppEngine(smollm2_gguf, n_ctx=N_CTX, n_threads=threads, prompt_cache_dir=cache) as engine:
        engine.prompt_cache.max_files = 2
        stables = [stable_prefix_length(ids, engine.token_bytes) for ids in prompts]
        for ids in prompts:
            engine.generate(ids, sampling=SAMPLING)
        kept = [engine.prompt_cache.path_for(ids[:n]) for ids, n in zip(prompts, stables)]
        assert [path.exists() for path in kept] == [False, True, True], _files(cache)

        engine.prompt_cache.max_bytes = 1
        engine.generate(_prompt(tokenize, tools=[]), sampling=SAMPLING)
        assert engine.prompt_cache.counts.saves == 3 and len(_files(cache)) == 2, engine.prompt_cache.counts


# ---------------------------------------------------------------------------------------------- the CLI
def test_research_keeps_the_cache_under_the_cache_folder_unless_told_not_to(smollm2_gguf, tmp_path):
    """``research`` turns the cache on in ``$XDG_CACHE_HOME/venus-edge/prompt-cache``; ``--no-prompt-cache`` off."""
    from venus_edge.cli import build_parser
    from venus_edge.session import SessionSettings, _load_engine

    def settings(argv: list[str]) -> SessionSettings:
        return SessionSettings.from_args(build_parser().parse_args(argv))

    base = ["research", "q", "--corpus", str(tmp_path), "--model", str(smollm2_gguf), "--n-ctx", "512"]
    assert default_prompt_cache_dir() == Path(os.environ["XDG_CACHE_HOME"]) / "venus-edge" / "prompt-cache"
    with _load_engine(settings(base), 1) as engine:
        assert engine.prompt_cache is not None and engine.prompt_cache.directory == default_prompt_cache_dir()
    with _load_engine(settings([*base, "--no-prompt-cache"]), 1) as engine:
        assert engine.prompt_cache is None


@pytest.mark.parametrize("make", ["a file", "under a file"])
def test_a_cache_folder_that_cannot_be_written_costs_one_warning_and_the_session_goes_on(
        make, smollm2_gguf, tokenize, tmp_path, threads, caplog):
    """A prompt-cache "folder" that is a file (or lies under one): it used to end the run with FileExistsError, then
    NotADirectoryError from the cleanup. Now the turns are generated without the cache, with one warning."""
    blocker = tmp_path / "prompt-cache"
    blocker.write_text("a file where the folder should be")
    cache = blocker if make == "a file" else blocker / "inner"
    prompts = [_prompt(tokenize, tools=tools) for tools in ([SEARCH], [VISIT])]
    with caplog.at_level(logging.WARNING, logger="venus_edge.engines.prompt_cache"), \
            LlamaCppEngine(smollm2_gguf, n_ctx=N_CTX, n_threads=threads, prompt_cache_dir=cache) as engine:
        completions = [engine.generate(ids, sampling=SAMPLING) for ids in prompts]
        assert engine.prompt_cache.unwritable is not None and engine.prompt_cache.counts.saves == 0
    assert all(completion.token_ids for completion in completions)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"cannot write to {cache}" in warnings[0], warnings
    assert blocker.read_text() == "a file where the folder should be"
