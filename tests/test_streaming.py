"""Live streaming and cancellation: ``TextDelta`` events arrive while the engine decodes, and a cancelled session
stops its decode within the turn, on the scripted engine and on real llama.cpp engines."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from venus_edge.agent import Agent
from venus_edge.engines.base import GREEDY, SamplingParams, StopStream, stream_generation
from venus_edge.engines.batched import BatchedLlamaCppEngine
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.errors import GenerationCancelled
from venus_edge.events import SessionFinished, TextDelta
from venus_edge.testing import ScriptedEngine, answer_turn, collect_events
from venus_edge.trajectory import read_journal

if TYPE_CHECKING:
    from conftest import RealModelRun

LONG_ANSWER = answer_turn("x" * 400)  # 40 pieces of 10 characters
PIECES = -(-len(LONG_ANSWER) // 10)


def slow_engine(*turns: str) -> ScriptedEngine:
    return ScriptedEngine(list(turns), piece_chars=10, delay_s=0.02)


def test_text_reaches_the_consumer_while_the_turn_is_decoded() -> None:
    engine = slow_engine(LONG_ANSWER)
    seen_at_first_delta = None
    stream = Agent(engine, []).events("q")
    for event in stream:
        if isinstance(event, TextDelta) and seen_at_first_delta is None:
            seen_at_first_delta = engine.pieces_streamed
    assert seen_at_first_delta is not None and seen_at_first_delta < PIECES // 2
    assert engine.pieces_streamed == PIECES


def test_deltas_concatenate_to_the_turn_text() -> None:
    result, events = collect_events(Agent(slow_engine(LONG_ANSWER), []).events("q"))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == LONG_ANSWER and result.termination == "answered"
    assert sum(isinstance(e, TextDelta) for e in events) == PIECES


def test_cancel_stops_the_decode_within_the_turn_and_journals_the_end(tmp_path: Path) -> None:
    engine = slow_engine(LONG_ANSWER)
    cancel = threading.Event()
    journal = tmp_path / "journal.jsonl"
    stream = Agent(engine, [], trajectory_path=journal).events("q", cancel=cancel)
    events = []
    for event in stream:
        events.append(event)
        if isinstance(event, TextDelta) and len(events) > 3:
            cancel.set()
    finished = events[-1]
    assert isinstance(finished, SessionFinished) and finished.result.termination == "cancelled"
    assert finished.result.answer is None and finished.result.session_id
    assert engine.pieces_streamed < PIECES // 2
    (trajectory,) = read_journal(journal).trajectories
    assert trajectory.termination == "cancelled" and trajectory.turns == []


def test_cancel_before_a_turn_ends_the_session_at_once() -> None:
    cancel = threading.Event()
    cancel.set()
    engine = slow_engine(LONG_ANSWER)
    result = Agent(engine, []).run("q", cancel=cancel)
    assert result.termination == "cancelled" and engine.prompts == []


def test_closing_the_stream_stops_the_decode_and_leaves_the_session_resumable(tmp_path: Path) -> None:
    engine = slow_engine(LONG_ANSWER)
    journal = tmp_path / "journal.jsonl"
    stream = Agent(engine, [], trajectory_path=journal).events("q")
    for event in stream:
        if isinstance(event, TextDelta):
            break
    stream.close()
    assert engine.pieces_streamed < PIECES // 2
    (trajectory,) = read_journal(journal).trajectories
    assert trajectory.termination == "incomplete"


def test_stop_stream_passes_nothing_on_after_a_cancel() -> None:
    received: list[str] = []

    def on_text(text: str) -> None:
        received.append(text)
        if len(received) == 2:
            raise GenerationCancelled("enough")

    stream = StopStream(["</answer>"], on_text)
    assert not stream.feed("ab")
    assert stream.feed("cd") and stream.cancelled and stream.finish_reason == "cancelled"
    stream.feed("ef")
    stream.flush()
    assert received == ["ab", "cd"]


def test_generation_errors_are_raised_to_the_consumer() -> None:
    engine = ScriptedEngine([RuntimeError("engine fault")])
    pieces = stream_generation(engine, [1, 2], sampling=GREEDY)
    try:
        next(pieces)
    except RuntimeError as exc:
        assert str(exc) == "engine fault"
    else:
        raise AssertionError("the engine's error was not raised")


def _cancel_after(stream: object, pieces: int, cancel: threading.Event | None = None) -> tuple[list[str], object]:
    received: list[str] = []
    while True:
        try:
            received.append(next(stream))  # type: ignore[call-overload]
        except StopIteration as done:
            return received, done.value
        if len(received) == pieces:
            if cancel is None:
                stream.close()  # type: ignore[attr-defined]
                return received, None
            cancel.set()


COUNT = "<|im_start|>user\nCount from 1 to 100.<|im_end|>\n<|im_start|>assistant\n"
# At least 48 numbers, each its digits and ", " (SmolLM2 splits digits into tokens of their own): at least 96 tokens
# of text whatever the model picks, so a decode cannot end before the cancel or before max_tokens=40.
NUMBERS = "root ::= " + " ".join(["number"] * 48) + ' number*\nnumber ::= [1-9] [0-9]? ", "'


def test_a_real_decode_stops_at_the_next_token_when_cancelled(smollm2_engine: LlamaCppEngine) -> None:
    prompt = smollm2_engine.tokenize(COUNT)
    sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=200)
    cancel = threading.Event()
    received, completion = _cancel_after(stream_generation(smollm2_engine, prompt, cancel=cancel, grammar=NUMBERS,
                                                           sampling=sampling), 5, cancel)
    assert completion.finish_reason == "cancelled"  # type: ignore[attr-defined]
    # Pieces the engine made before it saw the cancel still reach the consumer (on a loaded machine the consumer can
    # wake a token late); after the last of them the engine decodes at most the one token it then drops.
    assert len(received) >= 5
    assert len(completion.token_ids) <= len(received) + 1  # type: ignore[attr-defined]
    assert completion.text == "".join(received)  # type: ignore[attr-defined]
    # The engine is usable again at once, and its KV cache still matches what it holds.
    again = smollm2_engine.generate(prompt, grammar=NUMBERS, sampling=SamplingParams(
        temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=8))
    assert again.text.startswith("".join(received)[:5])


def test_a_cancel_during_a_long_prompt_stops_at_the_next_batch_and_keeps_what_was_evaluated(
        smollm2_gguf: Path, real_model_run: RealModelRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel (Ctrl-C, DELETE, a client that leaves) waited for the whole prompt: 24 s for 2,450 tokens of
    SmolLM2 on one thread, minutes for a 4B model and a long tool result. The engine asks between its 512-token
    batches; the consumer's first answer after the cancel stops it there. The batches evaluated stay in the KV
    cache: the same prompt again reuses them and writes what a new engine writes."""
    import llama_cpp

    prompt = [tok for _ in range(3) for tok in smollm2_engine_tokens(smollm2_gguf)][:2_000]
    sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=6)
    decodes: list[int] = []
    real_decode = llama_cpp.llama_decode

    def counted(ctx: object, batch: llama_cpp.llama_batch) -> int:
        decodes.append(batch.n_tokens)
        return int(real_decode(ctx, batch))

    with LlamaCppEngine(smollm2_gguf, n_ctx=4096, **real_model_run.engine_args(seed=0)) as engine:
        monkeypatch.setattr(llama_cpp, "llama_decode", counted)
        cancel = threading.Event()
        stream = stream_generation(engine, prompt, cancel=cancel, sampling=sampling)
        cancel.set()  # before the engine's first question: it stops after its first batch
        received, completion = _drain(stream)
        assert received == [] and completion.finish_reason == "cancelled" and completion.token_ids == []
        assert decodes == [512], decodes  # one batch of the four the prompt needs
        assert completion.stats.prompt_tokens_evaluated == 512
        monkeypatch.setattr(llama_cpp, "llama_decode", real_decode)
        again = engine.generate(prompt, sampling=sampling)
    assert again.stats.prompt_tokens_reused == 512 and again.finish_reason != "cancelled"
    with LlamaCppEngine(smollm2_gguf, n_ctx=4096, **real_model_run.engine_args(seed=0)) as fresh:
        assert fresh.generate(prompt, sampling=sampling).text == again.text


def smollm2_engine_tokens(model: Path) -> list[int]:
    with LlamaCppEngine(model, n_ctx=1024) as engine:
        return engine.tokenize(COUNT * 40)


def _drain(stream: Any) -> tuple[list[str], Any]:
    received = []
    try:
        while True:
            received.append(next(stream))
    except StopIteration as done:
        return received, done.value


def test_a_cancelled_batched_sequence_leaves_the_other_decoding(smollm2_gguf: Path,
                                                                 real_model_run: RealModelRun) -> None:
    sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=40)
    with BatchedLlamaCppEngine(smollm2_gguf, n_seq=2, n_ctx=1024,
                               **{"n_threads": 2, **real_model_run.thread_args()}) as batched:
        prompt = batched.tokenize(COUNT)
        results: dict[str, object] = {}
        other = threading.Thread(target=lambda: results.update(
            full=batched.sequence(1).generate(prompt, sampling=sampling, grammar=NUMBERS)))
        other.start()
        received, _ = _cancel_after(stream_generation(batched.sequence(0), prompt, sampling=sampling,
                                                      grammar=NUMBERS), 3)
        other.join()
        assert len(received) == 3
        full = results["full"]
        assert full.finish_reason == "length" and len(full.token_ids) == 40  # type: ignore[attr-defined]
        # The engine still serves the cancelled sequence (batches of other shapes round differently: compare lengths).
        again = batched.sequence(0).generate(prompt, sampling=sampling, grammar=NUMBERS)
        assert again.finish_reason == "length" and len(again.token_ids) == 40


def test_a_cancel_during_a_batched_prompt_stops_at_the_next_chunk_and_keeps_what_was_evaluated(
        smollm2_gguf: Path, real_model_run: RealModelRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batched engine (``serve --slots``, ``--samples``) evaluated a cancelled prompt to its end; it asks before
    each 512-token chunk now. The chunk evaluated stays cached for the sequence's next call, which then writes what
    a new engine writes (the same chunk boundaries, so the same numerics)."""
    import llama_cpp

    prompt = [tok for _ in range(3) for tok in smollm2_engine_tokens(smollm2_gguf)][:2_000]
    sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=6)
    args = {"n_threads": 2, **real_model_run.thread_args()}
    decodes: list[int] = []
    cancel = threading.Event()
    real_decode = llama_cpp.llama_decode

    def cancel_after_first(ctx: object, batch: llama_cpp.llama_batch) -> int:
        decodes.append(batch.n_tokens)
        cancel.set()
        return int(real_decode(ctx, batch))

    with BatchedLlamaCppEngine(smollm2_gguf, n_seq=1, n_ctx=4096, **args) as batched:
        monkeypatch.setattr(llama_cpp, "llama_decode", cancel_after_first)
        received, completion = _drain(stream_generation(batched.sequence(0), prompt, cancel=cancel,
                                                        sampling=sampling))
        assert received == [] and completion.finish_reason == "cancelled" and completion.token_ids == []
        assert decodes == [512], decodes  # one chunk of the four the prompt needs
        assert completion.stats.prompt_tokens_evaluated == 512 and completion.stats.prompt_tokens_reused == 0
        monkeypatch.setattr(llama_cpp, "llama_decode", real_decode)
        again = batched.sequence(0).generate(prompt, sampling=sampling)
    assert again.stats.prompt_tokens_reused == 512 and again.finish_reason != "cancelled"
    with BatchedLlamaCppEngine(smollm2_gguf, n_seq=1, n_ctx=4096, **args) as fresh:
        assert fresh.sequence(0).generate(prompt, sampling=sampling).text == again.text


def test_a_batched_request_waiting_for_another_sequences_prefix_is_cancelled_at_once(
        smollm2_gguf: Path, real_model_run: RealModelRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second rollout of the same prompt waits while the first prefills it (then copies it); cancelled while it
    waits, it ends then, with nothing evaluated, and the first rollout goes on."""
    import llama_cpp

    prompt = [tok for _ in range(3) for tok in smollm2_engine_tokens(smollm2_gguf)][:2_000]
    sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=6)
    decodes: list[int] = []
    cancel = threading.Event()
    waiting: dict[str, Any] = {}
    real_decode = llama_cpp.llama_decode

    with BatchedLlamaCppEngine(smollm2_gguf, n_seq=2, n_ctx=8192,
                               **{"n_threads": 2, **real_model_run.thread_args()}) as batched:

        def second_rollout() -> None:
            waiting["completion"] = batched.sequence(1).generate(
                prompt, sampling=sampling, on_text=lambda text: _raise_if(cancel))
            waiting["at_decode"] = len(decodes)

        def hooked(ctx: object, batch: llama_cpp.llama_batch) -> int:
            decodes.append(batch.n_tokens)
            if len(decodes) == 1:  # the first chunk of rollout 0: rollout 1 arrives and must wait for the prefix
                waiting["thread"] = threading.Thread(target=second_rollout)
                waiting["thread"].start()
                while batched._incoming.empty():
                    time.sleep(0.001)
            elif len(decodes) == 2:  # rollout 1 was seen and is waiting now
                cancel.set()
            return int(real_decode(ctx, batch))

        monkeypatch.setattr(llama_cpp, "llama_decode", hooked)
        first = batched.sequence(0).generate(prompt, sampling=sampling)
        waiting["thread"].join()
    cancelled = waiting["completion"]
    assert cancelled.finish_reason == "cancelled" and cancelled.token_ids == []
    assert cancelled.stats.prompt_tokens_evaluated == cancelled.stats.prompt_tokens_reused == 0
    assert waiting["at_decode"] < len(decodes)  # it ended before the first rollout's prompt did
    assert first.finish_reason != "cancelled" and first.stats.prompt_tokens_evaluated == 2_000


def _raise_if(cancel: threading.Event) -> None:
    if cancel.is_set():
        raise GenerationCancelled("cancelled")
