"""IGPO machinery: reward placement on real agent sessions, training sequences from the exact sampled ids, rollout
failures that score instead of stopping training, the transformers engine behind the agent loop, and a CI-sized
run of ``venus-edge train igpo`` that resumes to the same weights as an uninterrupted run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from venus_edge.agent import Agent, AgentConfig  # noqa: E402
from venus_edge.cli import main as cli  # noqa: E402
from venus_edge.engines.base import Completion, GenerationStats, SamplingParams  # noqa: E402
from venus_edge.testing import ScriptedEngine, tool_call_turn  # noqa: E402
from venus_edge.toolbox import close_tools, default_tools  # noqa: E402
from venus_edge.train.hf_engine import GenerationCall, TransformersEngine  # noqa: E402
from venus_edge.train.igpo_rollout import Rollout, assemble, run_rollout, turn_rewards  # noqa: E402
from venus_edge.train.igpo_scoring import pseudo_answer, score_boundaries_directly  # noqa: E402
from venus_edge.train.toyworld import ToyQuestion, oracle_policy  # noqa: E402


@pytest.fixture(scope="module")
def toy(tmp_path_factory, make_toy) -> Path:
    out = tmp_path_factory.mktemp("igpo")
    make_toy(out, people=12, seed=5)
    return out


@pytest.fixture(scope="module")
def policy(toy):
    tokenizer = transformers.AutoTokenizer.from_pretrained(toy / "base")
    model = transformers.AutoModelForCausalLM.from_pretrained(toy / "base", dtype=torch.float32).eval()
    return model, tokenizer


class OracleEngine:
    """The toy oracle's turns, tokenized with the tiny model's tokenizer and recorded as ``GenerationCall``s (the
    end-of-turn token included, log-probs 0), so that a session has known turns and exact ids."""

    def __init__(self, question: ToyQuestion, tokenizer: Any, policy: Any = None) -> None:
        self.scripted = ScriptedEngine(turns=policy or oracle_policy(question))
        self.tokenizer = tokenizer
        self.calls: list[GenerationCall] = []
        self.n_ctx = 100_000

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=not parse_special)["input_ids"]

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def model_info(self) -> dict[str, Any]:
        return {"engine": "oracle"}

    def reset_calls(self) -> list[GenerationCall]:
        calls, self.calls = self.calls, []
        return calls

    def generate(self, prompt_ids, *, sampling, stop=(), stop_text_if=None, grammar=None, on_text=None, seed=None):
        text = self.scripted.generate([ord(c) for c in self.detokenize(prompt_ids)], sampling=sampling).text
        ids = self.tokenize(text)
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls.append(GenerationCall(tuple(prompt_ids), tuple(ids) + (end,), (0.0,) * (len(ids) + 1)))
        return Completion(text, ids, "eog", None, GenerationStats(len(prompt_ids), len(prompt_ids), 0, len(ids) + 1,
                                                                  0.0, 0.0))


def _two_hop(toy: Path) -> ToyQuestion:
    rows = [json.loads(line) for line in (toy / "world" / "questions-train.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["kind"] == "town2")
    return ToyQuestion(row["id"], row["kind"], row["subject"], row["question"], row["answer"])


def test_ig_rewards_sit_on_the_visit_turns_and_the_outcome_on_the_last(toy, policy):
    model, tokenizer = policy
    question = _two_hop(toy)
    engine = OracleEngine(question, tokenizer)
    tools = default_tools([toy / "world" / "corpus"])
    try:
        rollout = run_rollout(engine, tools, question.question, [question.answer], group=question.id,
                              agent_config=AgentConfig(max_turns=8, max_retries=1), model=model, encode=tokenizer)
    finally:
        close_tools(tools)
    assert [t["kind"] for t in rollout.turns] == ["tool_call"] * 4 + ["answer"]
    assert [t["tool"] for t in rollout.turns] == ["search", "visit", "search", "visit", None]
    mentor = rollout.turns[2]["arguments"]["query"][0]
    assert rollout.turns[0]["arguments"] == {"query": [question.subject]} and mentor != question.subject
    assert rollout.turns[3]["arguments"]["url"] == [f"corpus://corpus/{mentor.lower().replace(' ', '-')}.md"]
    assert rollout.turns[4]["arguments"] is None
    assert rollout.correct and rollout.outcome == 1.0 and rollout.failure is None
    # scored: the prompt (baseline) and the contexts after each visit result; IG_t goes to turn t-1
    assert [s is not None for s in rollout.boundary_scores] == [True, False, True, False, True]
    assert [(r.turn, r.kind) for r in rollout.rewards] == [(1, "information_gain"), (3, "information_gain"),
                                                           (4, "outcome")]
    (sequence,) = rollout.sequences
    calls_prompts = [i for i in range(len(sequence.ids)) if sequence.turn_of[i] >= 0]
    assert sequence.trained_tokens == len(calls_prompts)
    # every trained token is a sampled one, in its turn; the rest (system, question, tool responses) is context
    turn_ids = [[sequence.ids[i] for i in range(len(sequence.ids)) if sequence.turn_of[i] == t] for t in range(5)]
    assert [tokenizer.decode(ids).endswith("<|im_end|>") for ids in turn_ids] == [True] * 5
    response = tokenizer.convert_tokens_to_ids("<tool_response>")
    assert all(sequence.turn_of[i] == -1 for i, token in enumerate(sequence.ids) if token == response)
    # the IG values are differences of one-forward-per-boundary scores of the same contexts
    answer = pseudo_answer(question.answer, tokenizer)
    contexts = [i for i in range(1, len(sequence.ids)) if sequence.turn_of[i] >= 0 and sequence.turn_of[i - 1] == -1]
    direct = score_boundaries_directly(model, sequence.ids, [contexts[0], contexts[2], contexts[4]], answer)
    assert rollout.rewards[0].value == pytest.approx(direct[1] - direct[0], abs=1e-5)
    assert rollout.rewards[1].value == pytest.approx(direct[2] - direct[1], abs=1e-5)


def test_every_tool_scored_and_the_outcome_only_ablation(toy, policy):
    model, tokenizer = policy
    question = _two_hop(toy)
    tools = default_tools([toy / "world" / "corpus"])
    try:
        every = run_rollout(OracleEngine(question, tokenizer), tools, question.question, [question.answer],
                            group="q", agent_config=AgentConfig(max_retries=1), model=model, encode=tokenizer,
                            score_after=None)
        ablation = run_rollout(OracleEngine(question, tokenizer), tools, question.question, [question.answer],
                               group="q", agent_config=AgentConfig(max_retries=1), model=model, encode=tokenizer,
                               information_gain=False)
    finally:
        close_tools(tools)
    assert [r.turn for r in every.rewards if r.kind == "information_gain"] == [0, 1, 2, 3]
    assert [(r.turn, r.kind, r.value) for r in ablation.rewards] == [(4, "outcome", 1.0)]


def test_format_penalties_replace_turn_rewards_and_a_malformed_answer_scores_minus_one():
    rollout = Rollout(group="q", question="?", answers=("x",), outcome=1.0)
    rollout.turns = [{"kind": "malformed", "tool": None, "format_errors": 1},
                     {"kind": "tool_call", "tool": "visit", "format_errors": 0},
                     {"kind": "answer", "tool": None, "format_errors": 2}]
    calls = [GenerationCall((1,), (2,), (0.0,))] * 3
    rewards = turn_rewards(rollout, calls, None, None)
    assert [(r.turn, r.value, r.kind) for r in rewards] == [(0, -1.0, "format_penalty"), (2, -1.0, "outcome")]
    rollout.turns[2]["format_errors"] = 0
    assert turn_rewards(rollout, calls, None, None)[-1].value == 1.0
    # the last turn is the answer turn whatever it holds: unclosed (malformed) or a call in the forced final turn
    for kind in ("malformed", "tool_call"):
        rollout.turns[2] = {"kind": kind, "tool": "visit", "format_errors": int(kind == "malformed")}
        assert turn_rewards(rollout, calls, None, None)[-1].value == -1.0
    rollout.failure = "RuntimeError: the engine died"  # not the policy's doing: outcome 0 stays
    rollout.outcome = 0.0
    assert turn_rewards(rollout, calls, None, None)[-1].value == 0.0


def test_sequences_are_split_where_the_context_rewrote_what_was_sampled():
    calls = [
        GenerationCall((1, 2, 3), (4, 5), (-0.4, -0.5)),
        GenerationCall((1, 2, 3, 4, 5, 9, 9), (6, 7), (-0.6, -0.7)),  # turn 0 kept as sampled: one sequence
        GenerationCall((1, 2, 3, 4, 8, 9, 9, 6, 7, 9), (10,), (-1.0,)),  # turn 0 rewritten (5 -> 8)
    ]
    first, second = assemble(calls)
    assert first.ids == [1, 2, 3, 4, 5, 9, 9, 6, 7]
    assert first.turn_of == [-1, -1, -1, 0, 0, -1, -1, 1, 1]
    assert first.old_logprobs == [0.0, 0.0, 0.0, -0.4, -0.5, 0.0, 0.0, -0.6, -0.7]
    # the shared prefix (1, 2, 3, 4) is context in the new sequence: no token is trained twice
    assert second.ids == [1, 2, 3, 4, 8, 9, 9, 6, 7, 9, 10]
    assert second.turn_of == [-1] * 10 + [2]
    # a stop token replaced by the end-of-turn markup only cuts the untrained tail
    (only,) = assemble([GenerationCall((1, 2), (3, 4), (-0.1, -0.2)), GenerationCall((1, 2, 3, 5), (6,), (-0.3,))])
    assert only.ids == [1, 2, 3, 5, 6] and only.turn_of == [-1, -1, 0, -1, 1]


def test_rollout_failures_score_instead_of_stopping_training(toy):
    tools = default_tools([toy / "world" / "corpus"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(toy / "base")
    question = _two_hop(toy)
    try:
        broken = OracleEngine(question, tokenizer)
        turns = iter([None, RuntimeError("the engine died")])
        original = broken.generate

        def failing(*args, **kwargs):
            error = next(turns, None)
            if error is not None:
                raise error
            return original(*args, **kwargs)

        broken.generate = failing
        crashed = run_rollout(broken, tools, question.question, [question.answer], group="q",
                              agent_config=AgentConfig(max_retries=1))
        searches = iter(range(100))
        endless = OracleEngine(question, tokenizer, policy=lambda prompt: tool_call_turn("search", query=[
            f"query {next(searches)}"]))
        never = run_rollout(endless, tools, question.question, [question.answer], group="q",
                            agent_config=AgentConfig(max_turns=3, max_retries=1))
    finally:
        close_tools(tools)
    assert crashed.failure == "RuntimeError: the engine died" and crashed.outcome == 0.0
    assert crashed.rewards[-1].kind == "outcome" and crashed.rewards[-1].value == 0.0
    assert never.failure is None and not never.correct and never.termination != "answered"
    assert never.rewards[-1].value == -1.0  # its forced final turn was a search, not an answer
    with pytest.raises(ValueError, match="max_retries=1"):
        run_rollout(OracleEngine(question, tokenizer), [], question.question, [question.answer], group="q",
                    agent_config=AgentConfig(max_retries=2))


def test_the_transformers_engine_drives_the_agent_loop_token_in_token_out(toy, policy):
    model, tokenizer = policy
    engine = TransformersEngine(model, tokenizer, n_ctx=4096)
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, presence_penalty=0.0, max_tokens=12, logprobs=True)
    tools = default_tools([toy / "world" / "corpus"])
    try:
        result = Agent(engine, tools, config=AgentConfig(max_turns=2, max_retries=1, sampling=sampling,
                                                         answer_reserve_tokens=256)).run("Who was Kemtus?")
    finally:
        close_tools(tools)
    assert result.termination and len(engine.calls) >= 2
    first, second = engine.calls[0], engine.calls[1]
    assert len(first.sampled_ids) == len(first.logprobs) <= 12
    # the log-probs are the model's own: recompute them with one forward over prompt + sampled ids
    ids = torch.tensor([list(first.prompt_ids) + list(first.sampled_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(first.prompt_ids) - 1:-1]
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(first.sampled_ids)[:, None])[:, 0]
    assert list(first.logprobs) == pytest.approx(expected.tolist(), abs=1e-4)
    # the second call reused the first's KV cache for the shared prefix
    assert second.prompt_ids[:len(first.prompt_ids)] == first.prompt_ids
    same = engine.generate(list(first.prompt_ids), sampling=sampling, seed=3)
    again = engine.generate(list(first.prompt_ids), sampling=sampling, seed=3)
    assert same.token_ids == again.token_ids and again.stats.prompt_tokens_reused == len(first.prompt_ids) - 1
    with pytest.raises(ValueError, match="without a grammar"):
        engine.generate([1, 2], sampling=sampling, grammar="root ::= \"x\"")


def test_a_ci_sized_run_trains_logs_and_resumes_to_the_same_weights(toy, igpo_config, tmp_path, capsys):
    straight = igpo_config(toy, tmp_path / "straight")
    assert cli(["train", "igpo", str(straight), "--quiet"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "straight" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("reward", "accuracy", "kl", "clip_fraction", "ig_scale", "rollout_tokens_per_s", "trained_tokens"):
        assert key in rows[0]
    # a random model's rollouts are all malformed: every group has equal rewards, hence zero advantages
    assert rows[0]["trained_tokens"] > 0 and rows[0]["all_same_outcome_groups"] == 2 and rows[0]["grad_norm"] == 0
    rollouts = (tmp_path / "straight" / "rollouts.jsonl").read_text().splitlines()
    assert len(rollouts) == 2 * 2 * 2
    # the same run stopped after one step and resumed; not onto other questions under the same file name
    questions = tmp_path / "questions.jsonl"
    questions.write_bytes((toy / "world" / "questions-train.jsonl").read_bytes())
    resumed = igpo_config(toy, tmp_path / "resumed", questions=[str(questions)])
    assert cli(["train", "igpo", str(resumed), "--steps", "1", "--quiet"]) == 0
    questions.write_bytes((toy / "world" / "questions-heldout.jsonl").read_bytes())
    assert cli(["train", "igpo", str(resumed), "--quiet"]) == 3
    assert "written by another config or data" in capsys.readouterr().err
    questions.write_bytes((toy / "world" / "questions-train.jsonl").read_bytes())
    assert cli(["train", "igpo", str(resumed), "--quiet"]) == 0
    assert "resumed from step 1" in capsys.readouterr().out
    resumed_rows = [json.loads(line) for line in (tmp_path / "resumed" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumed_rows] == [1, 2]
    assert (tmp_path / "resumed" / "run_date.txt").is_file()
    a = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "straight" / "final").state_dict()
    b = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "resumed" / "final").state_dict()
    base = transformers.AutoModelForCausalLM.from_pretrained(toy / "base").state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert any(not torch.equal(a[k], base[k]) for k in a)  # weight decay moved them


def test_one_update_raises_the_better_rollout_and_lowers_the_worse(toy, policy):
    from accelerate import Accelerator

    from venus_edge.train.igpo_trainer import IGPOConfig, _sequence_logprobs, _update

    _, tokenizer = policy
    model = transformers.AutoModelForCausalLM.from_pretrained(toy / "base", dtype=torch.float32)
    reference = transformers.AutoModelForCausalLM.from_pretrained(toy / "base", dtype=torch.float32).eval()
    question = _two_hop(toy)
    tools = default_tools([toy / "world" / "corpus"])
    try:
        oracle = oracle_policy(question)

        def wrong(prompt: str) -> str:  # the oracle's research, then a wrong answer
            turn = oracle(prompt)
            return turn.replace(f"<answer>\n{question.answer}\n", "<answer>\nNowhere\n")

        # outcome rewards only: the shared turns then get opposite advantages that cancel, and the answers differ
        good, bad = (run_rollout(OracleEngine(question, tokenizer, policy=turns), tools, question.question,
                                 [question.answer], group="q", agent_config=AgentConfig(max_retries=1))
                     for turns in (oracle, wrong))
    finally:
        close_tools(tools)
    assert (good.outcome, bad.outcome) == (1.0, 0.0)

    def answer_positions(rollout):
        (sequence,) = rollout.sequences
        last = len(rollout.turns) - 1
        return [i for i in range(1, len(sequence.ids)) if sequence.turn_of[i] == last]

    good_turn, bad_turn = ([r.sequences[0].ids[i] for i in answer_positions(r)] for r in (good, bad))
    shared = next(i for i, (a, b) in enumerate(zip(good_turn, bad_turn)) if a != b)
    tail = next(i for i, (a, b) in enumerate(zip(good_turn[::-1], bad_turn[::-1])) if a != b)

    def mean_logprob(rollout):  # of the answer tokens where the two rollouts differ (the rest cancels out)
        with torch.no_grad():
            values = _sequence_logprobs(model, rollout.sequences[0].ids, "cpu")
        positions = answer_positions(rollout)
        return float(values[[i - 1 for i in positions[shared:len(positions) - tail]]].mean())

    for rollout in (good, bad):  # the oracle's ids were not sampled by this model: use its own log-probs as old
        (sequence,) = rollout.sequences
        with torch.no_grad():
            own = _sequence_logprobs(model, sequence.ids, "cpu").tolist()
        sequence.old_logprobs = [0.0] + own
    before = mean_logprob(good), mean_logprob(bad)
    config = IGPOConfig.from_dict({"model": "m", "questions": ["q"], "corpus": ["c"], "output_dir": "o",
                                   "learning_rate": 1e-4})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)  # a plain gradient step: the direction is the loss's
    metrics = _update(config, model, reference, optimizer, Accelerator(cpu=True), [good, bad])
    after = mean_logprob(good), mean_logprob(bad)
    assert metrics["grad_norm"] > 0 and metrics["trained_tokens"] == sum(
        s.trained_tokens for r in (good, bad) for s in r.sequences)
    assert after[0] > before[0] and after[1] < before[1]


def test_bad_igpo_configs_are_errors(toy, igpo_config, tmp_path, capsys):
    bad_normalization = igpo_config(toy, tmp_path / "a", normalization="mean")
    assert cli(["train", "igpo", str(bad_normalization), "--quiet"]) == 2
    assert "normalization must be one of" in capsys.readouterr().err
    no_corpus = igpo_config(toy, tmp_path / "b", corpus=[str(tmp_path / "none")])
    assert cli(["train", "igpo", str(no_corpus), "--quiet"]) == 3
    assert "does not exist" in capsys.readouterr().err
