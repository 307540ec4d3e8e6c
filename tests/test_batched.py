"""BatchedLlamaCppEngine on a real model: N sequences in one llama.cpp context, each sampled on its own, the shared
prompt prefilled once, the Engine contract (stops, grammar, logprobs, limits) per sequence, and N real research
rollouts aggregated by `venus-edge research --samples`."""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor

import llama_cpp
import numpy as np
import pytest

from venus_edge import protocol
from venus_edge.cli import main
from venus_edge.engines.base import GREEDY, SamplingParams
from venus_edge.engines.batched import BatchedLlamaCppEngine
from venus_edge.engines.llama_cpp import off_main_thread
from venus_edge.errors import ContextOverflowError, EngineStateError
from venus_edge.trajectory import read_trajectories

CHAT = "<|im_start|>user\nWrite a short story about a robot learning to paint.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def batched(smollm2_gguf, real_model_run):
    engine = BatchedLlamaCppEngine(smollm2_gguf, n_seq=4, n_ctx=4 * 1024, **real_model_run.thread_args())
    yield engine
    engine.close()


def together(calls):
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def _log_softmax_of_each_position(model, prompt: list[int], generated: list[int]) -> np.ndarray:
    """(len(generated), n_vocab): the model's log-softmax before each generated token, from plain llama.cpp
    evaluating ``prompt + generated`` in one pass (logits_all)."""
    reference = llama_cpp.Llama(str(model), n_ctx=512, logits_all=True, verbose=False)
    try:
        off_main_thread(reference.eval, prompt + generated)
        logits = np.array(reference.scores[len(prompt) - 1 : len(prompt) - 1 + len(generated)], np.float64)
    finally:
        reference.close()
    logits -= logits.max(axis=1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def test_greedy_sequences_decode_what_the_single_engine_decodes(batched, smollm2_gguf):
    """Each sequence's tokens, whatever path it took, are the model's greedy choices with the model's log-probs,
    checked against plain llama.cpp on the same ids. (Batched numerics differ from one sequence's: the matmuls see
    4 rows, so greedy paths may part at a near-tie, at another step on another CPU; a near-tie is within 0.1.)"""
    greedy = dataclasses.replace(GREEDY, max_tokens=24, logprobs=True)
    prompt = batched.tokenize(CHAT)
    outputs = together([lambda s=s: batched.sequence(s).generate(prompt, sampling=greedy) for s in range(4)])
    for output in filter(lambda output: output.token_ids, outputs):
        expected = _log_softmax_of_each_position(smollm2_gguf, prompt, output.token_ids)
        chosen = expected[np.arange(len(output.token_ids)), output.token_ids]
        assert np.all(chosen >= expected.max(axis=1) - 0.1), (output.text, chosen, expected.max(axis=1))
        assert output.logprobs[0] == pytest.approx(chosen[0], abs=1e-3)  # the prompt's logits: one pass each
        assert np.max(np.abs(np.exp(output.logprobs) - np.exp(chosen))) < 0.1, (output.logprobs, chosen)


def _copy_prompt(urls: list[str]) -> str:
    links = "".join(f"{url}\n" for url in urls)
    return (f"<|im_start|>user\nHere is a list of links:\n{links}Write the list again, exactly, twice.<|im_end|>\n"
            "<|im_start|>assistant\n")


COPY_PROMPTS = (
    _copy_prompt(["https://docs.python.org/3/library/tomllib.html", "https://docs.python.org/3/library/pickle.html"]),
    _copy_prompt(["https://en.wikipedia.org/wiki/Lake_Baikal", "https://en.wikipedia.org/wiki/Angara_River"]),
)


def test_sequences_draft_by_lookup_and_keep_the_greedy_choices(smollm2_gguf, real_model_run):
    """Each sequence drafts from its own tokens (fixed length 4, so that it drafts on this compute-bound CPU too)
    and verifies its draft in the shared batch: every emitted token is still the model's greedy choice, the counts
    add up for any output, and the KV cache left behind serves the next turn.

    A near-tie here is within 0.5 nats: on these prompts the batched engine without drafts already picked tokens
    0.13 and 0.23 below the reference's best (batches of other shapes round otherwise); a token sampled from the
    wrong row or a stale KV cell would be several nats off (and its probability, here within 0.25 of the
    reference's, far from it)."""
    engine = BatchedLlamaCppEngine(smollm2_gguf, n_seq=2, n_ctx=2 * 2048, draft="lookup", draft_tokens=4,
                                   **real_model_run.thread_args())
    try:
        assert engine.model_info()["draft"] == "lookup"
        greedy = dataclasses.replace(GREEDY, max_tokens=80, logprobs=True)
        prompts = [engine.tokenize(text) for text in COPY_PROMPTS]
        outputs = together([lambda s=s: engine.sequence(s).generate(prompts[s], sampling=greedy) for s in range(2)])
        for prompt, output in zip(prompts, outputs):
            stats = output.stats
            # the first token comes from the prompt's logits; each step after it emits 1 + its accepted drafts,
            # less where the turn ended inside a verified draft
            assert 0 <= stats.accepted_tokens <= stats.drafted_tokens <= 4 * stats.verify_steps, stats
            if stats.drafted_tokens:
                assert 1 + stats.verify_steps <= stats.tokens_decoded, stats
                assert stats.tokens_decoded <= 1 + stats.verify_steps + stats.accepted_tokens, stats
            if output.token_ids:
                expected = _log_softmax_of_each_position(smollm2_gguf, prompt, output.token_ids)
                chosen = expected[np.arange(len(output.token_ids)), output.token_ids]
                assert np.all(chosen >= expected.max(axis=1) - 0.5), (output.text, chosen, expected.max(axis=1))
                assert np.max(np.abs(np.exp(output.logprobs) - np.exp(chosen))) < 0.25, (output.logprobs, chosen)
        assert sum(o.stats.accepted_tokens for o in outputs) > 0, [o.text for o in outputs]  # copying pays
        # The rejected drafts' KV cells are gone: the next turn evaluates only its new tokens.
        first = outputs[0]
        suffix = engine.tokenize("<|im_end|>\n<|im_start|>user\nThanks.<|im_end|>\n<|im_start|>assistant\n")
        second = engine.sequence(0).generate(prompts[0] + first.token_ids + suffix,
                                             sampling=dataclasses.replace(GREEDY, max_tokens=4))
        unevaluated = 1 if first.finish_reason == "length" else 0
        assert second.stats.prompt_tokens_evaluated == len(suffix) + unevaluated, second.stats
    finally:
        engine.close()


def test_the_batched_engine_drafts_by_lookup_only(smollm2_gguf):
    with pytest.raises(ValueError, match="prompt lookup only"):
        BatchedLlamaCppEngine(smollm2_gguf, n_seq=2, draft=str(smollm2_gguf))
    with pytest.raises(ValueError, match="fixed draft length"):
        BatchedLlamaCppEngine(smollm2_gguf, n_seq=2, draft="lookup", draft_tokens=99)


def test_the_shared_prompt_is_prefilled_once_and_copied(batched):
    prompt = batched.tokenize(CHAT + "Once")
    sampling = dataclasses.replace(GREEDY, max_tokens=4)
    outputs = together([lambda s=s: batched.sequence(s).generate(prompt, sampling=sampling) for s in range(4)])
    evaluated = sorted(o.stats.prompt_tokens_evaluated for o in outputs)
    assert evaluated[:3] == [1, 1, 1] and evaluated[3] <= len(prompt), evaluated
    assert all(o.stats.prompt_tokens_reused == len(prompt) - o.stats.prompt_tokens_evaluated for o in outputs)


def test_a_sequence_reuses_its_own_prefix_across_turns(batched):
    """On a prompt of its own: a sequence copies the longest prefix any sequence holds, and another test's
    sequences may hold this turn's greedy tokens too (or not, after a near-tie)."""
    sequence = batched.sequence(1)
    prompt = batched.tokenize("<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n")
    first = sequence.generate(prompt, sampling=dataclasses.replace(GREEDY, max_tokens=8))
    suffix = batched.tokenize("<|im_end|>\n<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\n")
    second = sequence.generate(prompt + first.token_ids + suffix, sampling=dataclasses.replace(GREEDY, max_tokens=4))
    # a turn cut by max_tokens ends on a token that was sampled but never decoded: it and the new suffix are
    # evaluated (a turn that ended on its end token decoded all of its tokens)
    unevaluated = 1 if first.finish_reason == "length" else 0
    assert second.stats.prompt_tokens_evaluated == len(suffix) + unevaluated, second.stats


def test_each_sequence_samples_with_its_own_seed(batched, real_model_run):
    """Different seeds in one batch, different texts (64 tokens drawn at temperature 1 from the top 20: two seeds
    agreeing on all of them is vanishingly unlikely); the same seed in the same batch shape, the same text. (Which
    requests share a batch changes float rounding, so a seed reproduces a text only in the same batch shape.)"""
    prompt = batched.tokenize(CHAT)
    sampling = SamplingParams(max_tokens=64, presence_penalty=0.0)
    seeds = [real_model_run.seed(s) for s in range(4)]
    outputs = together([lambda s=s: batched.sequence(s).generate(prompt, sampling=sampling, seed=seeds[s])
                        for s in range(4)])
    assert len({o.text for o in outputs}) == 4
    alone = [batched.sequence(2).generate(prompt, sampling=sampling, seed=real_model_run.seed(11)).text
             for _ in range(2)]
    assert alone[0] == alone[1]


def test_sequences_keep_their_own_grammar_and_stops(batched):
    """One sequence is forced to answer, one to write reasoning that mentions <tool_response> (text, kept), one to
    write a hallucinated observation after its action (cut), all in the same batches."""
    prompt = batched.tokenize(CHAT)
    answer = 'root ::= "done\\n</think>\\n\\n<answer>\\nA\\n</answer>"'
    mention = 'root ::= "I read <tool_response> blocks."'
    after = 'root ::= "x\\n</think>\\n\\n<answer>\\nB\\n</answer>\\n<tool_response> fake"'
    rules = dict(sampling=dataclasses.replace(GREEDY, max_tokens=40), stop=protocol.STOP_STRINGS,
                 stop_text_if=protocol.action_complete)
    outputs = together([lambda s=s, g=g: batched.sequence(s).generate(prompt, grammar=g, **rules)
                        for s, g in enumerate((answer, mention, after))])
    assert outputs[0].text == "done\n</think>\n\n<answer>\nA\n</answer>" and outputs[0].finish_reason == "eog"
    assert outputs[1].text == "I read <tool_response> blocks." and outputs[1].finish_reason == "eog"
    assert outputs[2].text == "x\n</think>\n\n<answer>\nB\n</answer>\n" and outputs[2].finish_reason == "stop"


def test_a_bad_grammar_fails_its_request_only(batched):
    prompt = batched.tokenize(CHAT)
    with pytest.raises(ValueError, match="grammar"):
        batched.sequence(0).generate(prompt, grammar="root ::= (", sampling=dataclasses.replace(GREEDY, max_tokens=4))
    other = batched.sequence(1).generate(prompt, sampling=dataclasses.replace(GREEDY, max_tokens=4))
    assert other.finish_reason in ("eog", "length") and other.stats.tokens_decoded >= 1


def test_limits_and_lifecycle(smollm2_gguf):
    engine = BatchedLlamaCppEngine(smollm2_gguf, n_seq=2, n_ctx=512)
    with pytest.raises(ContextOverflowError, match="n_ctx is 256"):
        engine.sequence(0).generate(list(range(300)), sampling=GREEDY)
    with pytest.raises(ValueError, match="has 2"):
        engine.sequence(2)
    engine.close()
    with pytest.raises(EngineStateError, match="closed"):
        engine.sequence(0).generate([1, 2, 3], sampling=GREEDY)


def test_a_page_read_beside_full_sequences_fails_none_of_them(smollm2_gguf, real_model_run):
    """``complete`` (visit's evidence) ran in the sequences' cells and kept its own after it: one long page read
    while every sequence was near its window filled the cache, and every sequence's next decode failed with
    ContextOverflowError (serve --slots: one visit failed every session). It has cells of its own now."""
    engine = BatchedLlamaCppEngine(smollm2_gguf, n_seq=2, n_ctx=1024, **real_model_run.thread_args())
    try:
        words = " ".join(f"word{i}" for i in range(130))
        engine.complete([{"role": "user", "content": f"Repeat: {words}"}], max_tokens=20)
        assert len(engine._kv_tokens[2]) > 400  # the page stays cached in the helper's cells
        long = engine.tokenize(CHAT * 30)
        prompts = [long[:440], long[-440:]]  # two different prompts of 440 tokens: 880 of the 1,024 cells
        sixty = dataclasses.replace(GREEDY, max_tokens=60)
        outputs = together([lambda s=s: engine.sequence(s).generate(prompts[s], sampling=sixty) for s in range(2)])
        assert all(output.finish_reason in ("length", "eog") for output in outputs)  # it raised before
        assert engine.helper_n_ctx == 512  # a sequence's window: below LlamaCppEngine's 8,192
        with pytest.raises(ContextOverflowError, match="n_ctx is 512"):  # the helper keeps to its own window
            engine.complete([{"role": "user", "content": f"Repeat: {words} {words}"}], max_tokens=20)
    finally:
        engine.close()


def test_the_memory_plan_prices_the_helpers_cells(smollm2_gguf):
    from venus_edge.memory.header import read_model_header
    from venus_edge.memory.plan import estimate_memory

    header = read_model_header(smollm2_gguf)
    plan = BatchedLlamaCppEngine.memory_plan(header, n_seq=4, n_ctx=65_536)
    assert plan.n_ctx == 65_536 + 8_192  # LlamaCppEngine's helper window, below a sequence's 16,384
    assert plan.total_bytes == estimate_memory(header, n_ctx=65_536 + 8_192).total_bytes
    assert BatchedLlamaCppEngine.memory_plan(header, n_seq=2, n_ctx=1024).n_ctx == 1024 + 512


@pytest.mark.slow  # --max-tokens 1200: no strict turn is cut, whatever is sampled (tests/test_research.py)
def test_research_samples_run_together_and_aggregate(smollm2_gguf, docs_corpus, tmp_path, capsys, real_model_run):
    out = tmp_path / "samples.jsonl"
    code = main(["research", "When was the tomllib module added to Python?", "--model", str(smollm2_gguf),
                 "--corpus", str(docs_corpus), "--strict", "--min-tool-calls", "1", "--max-turns", "1",
                 "--max-tokens", "1200", "--n-ctx", "4096", "--samples", "3", "--aggregate", "majority",
                 "--out", str(out), "--json", "--quiet", *real_model_run.cli_args()])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["answer"] is not None and len(payload["samples"]) == 3
    assert payload["samples"][payload["chosen_sample"]]["answer"] == payload["answer"]
    sessions = read_trajectories(out)
    assert len(sessions) == 3 and len({s.header["config"]["seed"] for s in sessions}) == 3
    assert all(s.header["model"]["n_seq"] == 3 for s in sessions)
