"""Speculative decoding (``venus_edge.engines.speculative``, ``venus_edge.engines.decode``) and the native decode loop
on the real SmolLM2 model: the output is the model's, with and without drafts, and against llama-cpp-python's own
``Llama.generate``."""

from __future__ import annotations

import math
from collections import Counter

import llama_cpp
import pytest

from venus_edge.engines.base import SamplingParams
from venus_edge.engines.llama_cpp import LlamaCppEngine, off_main_thread
from venus_edge.engines.speculative import GAIN_MARGIN, DraftLength, PromptLookup, expected_tokens
from venus_edge.errors import GenerationCancelled, ModelLoadError

URLS = ("https://docs.python.org/3/library/tomllib.html\nhttps://docs.python.org/3/library/pickle.html\n"
        "https://docs.python.org/3/whatsnew/3.11.html\n")
COPY = (f"<|im_start|>user\nHere is a list of links:\n{URLS}Write the list again, exactly, twice.<|im_end|>\n"
        "<|im_start|>assistant\n")
UNICODE = ("<|im_start|>user\nCopy this line three times: 中文：北京是中国的首都。日本語もテスト。🚀🎉 café Ångström"
           "<|im_end|>\n<|im_start|>assistant\n")
GREEDY_LONG = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=120)


@pytest.fixture(scope="module")
def plain(smollm2_gguf, real_model_run):
    """No drafts, with the batch-invariant numerics that drafting uses (the reference of every comparison)."""
    engine = LlamaCppEngine(smollm2_gguf, n_ctx=4096, helper_n_ctx=2048, batch_invariant=True,
                            **real_model_run.engine_args())
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def lookup(smollm2_gguf, real_model_run):
    """Prompt lookup, drafting 4 tokens whenever it has them (this CPU's cost rule would often draft none)."""
    engine = LlamaCppEngine(smollm2_gguf, n_ctx=4096, helper_n_ctx=2048, draft="lookup", draft_tokens=4,
                            **real_model_run.engine_args())
    yield engine
    engine.close()


# ---------------------------------------------------------------------------------------------- the rules alone
def test_prompt_lookup_proposes_what_followed_the_latest_occurrence():
    drafter = PromptLookup(ngram=3, min_ngram=2)
    drafter.begin([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 0, 1, 2, 3])
    assert drafter.propose(2) == [7, 8]  # the latest earlier occurrence of (1, 2, 3), not the first
    drafter.extend([7])
    assert drafter.propose(3) == [8, 0, 1]
    drafter.begin([5, 6, 5])  # not an extension of the context: the index starts over
    assert drafter.tokens == [5, 6, 5] and drafter.propose(4) == []  # (6, 5) never occurred before
    drafter.extend([6])
    assert drafter.propose(4) == [5, 6]  # the 2-gram (5, 6) was followed by 5, 6
    assert PromptLookup().propose(3) == []


def test_draft_length_drafts_only_where_it_is_expected_to_pay():
    assert expected_tokens(0.5, 0) == 1.0 and expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    compute_bound = DraftLength(explore_every=1000)
    for n, seconds in {1: 1.0, 2: 1.8, 3: 2.5, 5: 3.9, 9: 7.0, 17: 13.0}.items():
        compute_bound.record_decode(n, seconds)
    compute_bound.counts["cold"] = [60, 100]
    assert compute_bound.cost_ratio(4) == pytest.approx(3.2)  # between the measured 3 and 5
    assert compute_bound.choose(16) == 0  # 0.6 acceptance never pays for a batch that costs ~k tokens
    memory_bound = DraftLength(explore_every=1000)
    for n, seconds in {1: 1.0, 2: 1.02, 5: 1.1, 9: 1.25, 17: 1.6}.items():
        memory_bound.record_decode(n, seconds)
    memory_bound.counts["cold"] = [60, 100]
    chosen = memory_bound.choose(16)
    assert chosen >= 2 and memory_bound.choose(1) == 1 and memory_bound.choose(0) == 0
    # a fully accepted draft makes the next step "hot", with its own acceptance
    compute_bound.record_verification(4, 4)
    compute_bound.counts["hot"] = [97, 100]
    assert compute_bound.hot and compute_bound.choose(16) > 0
    compute_bound.record_verification(3, 1)
    assert not compute_bound.hot and compute_bound.choose(16) == 0
    explorer = DraftLength(explore_every=3)
    explorer.seconds = dict(compute_bound.seconds)
    assert [explorer.choose(8) for _ in range(6)] == [0, 0, 1, 0, 0, 1]
    assert DraftLength(fixed=3).choose(2) == 2
    with pytest.raises(ValueError, match="fixed draft length"):
        DraftLength(fixed=17)


def test_draft_length_needs_the_gain_margin_over_plain_decoding():
    """A draft length expected to be only a little faster than plain decoding is not taken (the estimates are
    noisy); among those that clear the margin, the best expected speed wins."""
    def chooser(verify_seconds: float) -> DraftLength:
        draft_length = DraftLength(explore_every=1000)
        draft_length.record_decode(1, 1.0)
        draft_length.record_decode(2, verify_seconds)
        draft_length.counts["cold"] = [50, 100]
        return draft_length
    # one drafted token at acceptance 0.5 gives 1.5 tokens per step for `verify_seconds`
    cheap_enough = 1.5 / (GAIN_MARGIN * 1.01)
    too_dear = 1.5 / (GAIN_MARGIN * 0.99)
    assert chooser(cheap_enough).choose(1) == 1
    assert chooser(too_dear).choose(1) == 0
    memory_bound = DraftLength(explore_every=1000)
    for n, seconds in {1: 1.0, 2: 1.0, 3: 1.0, 5: 1.0, 9: 1.0, 17: 1.0}.items():
        memory_bound.record_decode(n, seconds)
    memory_bound.counts["cold"] = [50, 100]
    # free verification: expected tokens grow with k, so the longest draft has the best score
    assert memory_bound.choose(16) == 16
    # in a batch of 4 sequences one draft adds its gain to 4 tokens' worth of step: a step of 4 + k tokens
    # that costs no more than 4 pays, one whose cost grows with every token does not
    batched = DraftLength(explore_every=1000)
    for n in range(4, 21):
        batched.record_decode(n, 1.0 if n <= 8 else n / 8)
    batched.counts["cold"] = [50, 100]
    assert batched.choose(16, batch=4) == 4  # 1.9375 tokens for the price of one: the most before the cost grows
    compute = DraftLength(explore_every=1000)
    for n in range(4, 21):
        compute.record_decode(n, n / 4)
    compute.counts["cold"] = [90, 100]
    assert compute.choose(16, batch=4) == 0


# ---------------------------------------------------------------------------------------------- same output
def test_native_loop_gives_llama_cpp_python_generate_output(smollm2_engine, smollm2_gguf, real_model_run):
    """The native loop against ``Llama.generate`` (the path it replaced), same seed: greedy, sampled with the
    presence penalty, and under a grammar."""
    engine = smollm2_engine
    reference = off_main_thread(lambda: llama_cpp.Llama(str(smollm2_gguf), n_ctx=2048, n_threads=engine.n_threads,
                                                        n_threads_batch=engine.n_threads, verbose=False))
    grammar = 'root ::= "The answer is " [0-9]+ "."'
    try:
        for sampling, seed, with_grammar in ((GREEDY_LONG, 0, False), (SamplingParams(max_tokens=60), 11, False),
                                             (SamplingParams(max_tokens=60), 12, False),
                                             (SamplingParams(max_tokens=20), 13, True)):
            seed = real_model_run.seed(seed)
            prompt = engine.tokenize(COPY)
            ours = engine.generate(prompt, sampling=sampling, seed=seed, grammar=grammar if with_grammar else None)

            def theirs(sampling: SamplingParams = sampling, seed: int = seed, with_grammar: bool = with_grammar,
                       prompt: list[int] = prompt, length: int = len(ours.token_ids)) -> list[int]:
                reference.reset()
                reference.set_seed(seed)
                reference.last_n_tokens_size = min(sampling.max_tokens, 2048 - len(prompt))
                compiled = llama_cpp.LlamaGrammar.from_string(grammar, verbose=False) if with_grammar else None
                tokens: list[int] = []
                for token in reference.generate(prompt, top_k=sampling.top_k, top_p=sampling.top_p, min_p=0.0,
                                                temp=sampling.temperature, repeat_penalty=1.0,
                                                presence_penalty=sampling.presence_penalty, grammar=compiled):
                    if llama_cpp.llama_vocab_is_eog(reference._model.vocab, token) or len(tokens) == length:
                        break
                    tokens.append(token)
                return tokens

            assert ours.token_ids == off_main_thread(theirs), (sampling, seed, with_grammar, ours.text)
    finally:
        reference.close()


@pytest.mark.parametrize("prompt", [COPY, UNICODE], ids=["copy", "unicode"])
def test_greedy_text_is_the_same_with_prompt_lookup(plain, lookup, prompt):
    expected = plain.generate(plain.tokenize(prompt), sampling=GREEDY_LONG)
    drafted = lookup.generate(lookup.tokenize(prompt), sampling=GREEDY_LONG)
    assert drafted.text == expected.text and drafted.token_ids == expected.token_ids
    assert drafted.finish_reason == expected.finish_reason
    stats = drafted.stats
    assert stats.drafted_tokens > 0 and 0 < stats.accepted_tokens <= stats.drafted_tokens, stats
    assert stats.verify_steps + stats.accepted_tokens == stats.tokens_decoded - 1  # one step per token not drafted


def test_grammar_stop_strings_and_seeded_sampling_are_the_same_with_drafts(plain, lookup, real_model_run):
    ids = plain.tokenize(COPY)
    grammar = 'root ::= ("https://docs.python.org/3/" [a-z./0-9]+ "\\n")+'
    for kwargs in ({"sampling": GREEDY_LONG, "grammar": grammar},
                   {"sampling": GREEDY_LONG, "stop": ["pickle", "<|im_end|>"]},
                   {"sampling": SamplingParams(max_tokens=80), "seed": real_model_run.seed(5)},
                   {"sampling": SamplingParams(max_tokens=80, logprobs=True), "seed": real_model_run.seed(6)}):
        expected = plain.generate(ids, **kwargs)
        drafted = lookup.generate(ids, **kwargs)
        assert (drafted.text, drafted.finish_reason, drafted.stop_string) == (
            expected.text, expected.finish_reason, expected.stop_string), kwargs
        if expected.logprobs is not None:
            assert drafted.logprobs == pytest.approx(expected.logprobs, abs=1e-4)


def test_the_kv_cache_after_drafts_serves_the_next_turn_as_without(plain, lookup):
    """Rejected drafts are cut from the KV cache: the next turn reuses and evaluates what it would without."""
    first = plain.tokenize(COPY)
    results = []
    for engine in (plain, lookup):
        turn = engine.generate(first, sampling=GREEDY_LONG, stop=["<|im_end|>"])
        follow = engine.tokenize("<|im_end|>\n<|im_start|>user\nNow only the second link.<|im_end|>\n"
                                 "<|im_start|>assistant\n")
        second = engine.generate(first + turn.token_ids + follow, sampling=GREEDY_LONG)
        results.append((turn.text, second.text, second.stats.prompt_tokens_reused,
                        second.stats.prompt_tokens_evaluated, engine._context.tokens))
    assert results[0] == results[1]


def test_cancelling_mid_draft_ends_the_turn_and_keeps_the_engine_usable(plain, lookup):
    def cancel_after(pieces: int):
        seen: list[str] = []

        def on_text(text: str) -> None:
            if len(seen) == pieces:
                raise GenerationCancelled("enough")
            seen.append(text)
        return on_text

    ids = plain.tokenize(COPY)
    expected = plain.generate(ids, sampling=GREEDY_LONG, on_text=cancel_after(25))
    cancelled = lookup.generate(ids, sampling=GREEDY_LONG, on_text=cancel_after(25))
    assert cancelled.finish_reason == expected.finish_reason == "cancelled"
    assert cancelled.text == expected.text
    assert lookup.generate(ids, sampling=GREEDY_LONG).text == plain.generate(ids, sampling=GREEDY_LONG).text


def test_visit_extraction_is_the_same_with_drafts(plain, lookup):
    page = "Release notes.\n" + URLS * 3 + "The tomllib module was added in Python 3.11.\n"
    messages = [{"role": "user", "content": f"Page:\n{page}\nQuote the sentence about tomllib, exactly."}]
    assert lookup.complete(messages, max_tokens=60) == plain.complete(messages, max_tokens=60)


def test_a_draft_model_gives_the_same_greedy_text(plain, smollm2_gguf, real_model_run):
    """A draft GGUF (here the same model, the only one with this vocabulary in the suite) on its own context."""
    with LlamaCppEngine(smollm2_gguf, n_ctx=4096, draft=smollm2_gguf, draft_tokens=3,
                        **real_model_run.engine_args()) as drafted:
        ids = plain.tokenize(UNICODE)
        completion = drafted.generate(ids, sampling=GREEDY_LONG)
        assert completion.text == plain.generate(ids, sampling=GREEDY_LONG).text
        assert completion.stats.accepted_tokens > 0, completion.stats
        info = drafted.model_info()
        assert info["draft"] == str(smollm2_gguf) and info["batch_invariant"] and info["flash_attn"]


def test_a_draft_model_with_another_vocabulary_is_refused(smollm2_gguf, tiny_qwen3_gguf):
    with pytest.raises(ModelLoadError, match=r"as a draft model: its vocabulary has .* tokens and the model it"):
        LlamaCppEngine(smollm2_gguf, n_ctx=1024, draft=tiny_qwen3_gguf)
    with pytest.raises(ValueError, match="batch_invariant"):
        LlamaCppEngine(smollm2_gguf, n_ctx=1024, draft="lookup", batch_invariant=False)


# ---------------------------------------------------------------------------------------------- same distribution
#: Samples per side. The chi-square test of homogeneity rejects at alpha = 1e-3: a correct engine fails it about
#: once in a thousand runs (the asymptotic chi-square law; categories with few counts are pooled into one).
SAMPLES = 200
ALPHA_Z = 3.090  # the standard normal's 1 - 1e-3 quantile


def test_sampled_tokens_have_the_same_distribution_with_drafts(plain, lookup, real_model_run):
    """Tokens 2-3 of a sampled continuation (those that drafted positions verify), over disjoint seeds with and
    without drafting: a chi-square test of homogeneity (two samples, pooled rare categories)."""
    prompt = plain.tokenize("<|im_start|>user\nContinue: red blue green red blue green red blue<|im_end|>\n"
                            "<|im_start|>assistant\nred blue green red blue")
    sampling = SamplingParams(max_tokens=3)
    base = real_model_run.seed(1000)
    without = Counter(tuple(plain.generate(prompt, sampling=sampling, seed=base + i).token_ids[1:3])
                      for i in range(SAMPLES))
    drafted_total = 0
    with_drafts: Counter[tuple[int, ...]] = Counter()
    for i in range(SAMPLES):
        completion = lookup.generate(prompt, sampling=sampling, seed=base + SAMPLES + i)
        with_drafts[tuple(completion.token_ids[1:3])] += 1
        drafted_total += completion.stats.drafted_tokens
    assert drafted_total > SAMPLES  # the positions compared were drafted
    categories = [c for c in without.keys() | with_drafts.keys() if without[c] + with_drafts[c] >= 10]
    rows = [[without[c], with_drafts[c]] for c in categories]
    rows.append([SAMPLES - sum(r[0] for r in rows), SAMPLES - sum(r[1] for r in rows)])
    rows = [r for r in rows if sum(r)]
    statistic = sum((observed - sum(r) / 2) ** 2 / (sum(r) / 2) for r in rows for observed in r)
    df = len(rows) - 1
    if df == 0:
        return  # one outcome on both sides: the same distribution
    critical = df * (1 - 2 / (9 * df) + ALPHA_Z * math.sqrt(2 / (9 * df))) ** 3  # Wilson-Hilferty
    assert statistic < critical, (statistic, critical, without.most_common(5), with_drafts.most_common(5))
