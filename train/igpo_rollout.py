"""IGPO rollouts: the runtime's own agent loop over a token-in/token-out engine, turned into training sequences
and turn rewards.

``run_rollout`` runs ``Agent`` with a recording engine (``TransformersEngine``, or any engine whose ``calls`` hold
the prompts and sampled ids), then

- ``assemble`` builds the training sequences from the recorded calls: the ids the policy sampled (end-of-turn
  token included) are trained with their log-probs; everything else the agent put in the context (system prompt,
  question, tool responses, notices) is context only. When a later context no longer holds an earlier turn's
  sampled ids as generated (the agent rewrote the turn canonically, a stop token was replaced by ``<|im_end|>``,
  an observation was replaced by a limit notice), the sequence so far is kept as its own training sequence, so
  that every trained token is one the policy sampled in the context it saw;
- ``turn_rewards`` scores the ground truth at each turn boundary (``igpo_scoring``), turns the scores into
  information gains, applies the format penalty, and adds the outcome.

Failures never stop training: a tool error or crash is an observation (the toolbox turns it into text), a model
that never answers ends with the agent's termination and outcome 0, and an exception out of the loop or the
scoring (an over-long context, a broken engine) ends the rollout with outcome 0 and ``failure`` set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from venus_edge.eval.metrics import exact_match, token_f1
from venus_edge.train.hf_engine import GenerationCall
from venus_edge.train.igpo import TurnReward, information_gains
from venus_edge.train.igpo_scoring import pseudo_answer, score_boundaries

__all__ = ["RecordingEngine", "Rollout", "TrainingSequence", "assemble", "outcome_score", "run_rollout",
           "turn_rewards"]


@dataclass
class TrainingSequence:
    """Token ids to train on, with each token's turn (-1: context only) and its sampling log-prob (0 where -1)."""

    ids: list[int] = field(default_factory=list)
    turn_of: list[int] = field(default_factory=list)
    old_logprobs: list[float] = field(default_factory=list)

    @property
    def trained_tokens(self) -> int:
        return sum(1 for turn in self.turn_of if turn >= 0)

    def cut(self, length: int) -> TrainingSequence:
        return TrainingSequence(self.ids[:length], self.turn_of[:length], self.old_logprobs[:length])


class RecordingEngine:
    """Any token-in/token-out ``Engine`` (``OpenAIEngine`` on vLLM, or on llama-server with ``exact_token_ids``)
    that records its calls as ``TransformersEngine`` does, for ``run_rollout``: each call's prompt ids, the ids
    sampled (the token that ended generation included, ``Completion.end_token``) and their log-probabilities as
    the server computed them, NaN where it sent none (the trainer recomputes old log-probs on the policy).

    One recorder per rollout in flight; the engine under it may be shared by several (``OpenAIEngine`` is
    thread-safe). Everything else (``n_ctx``, ``tokenize``, ``complete``...) is the wrapped engine's.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.calls: list[GenerationCall] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    @property
    def n_ctx(self) -> int:
        return int(self.engine.n_ctx)

    @property
    def concurrent_rollouts(self) -> bool:
        """False: a recorder records one rollout (the engine under it may serve several recorders)."""
        return False

    def reset_calls(self) -> list[GenerationCall]:
        """Return the recorded calls and start a new record."""
        calls, self.calls = self.calls, []
        return calls

    def generate(self, prompt_ids: Sequence[int], *, sampling: Any, **options: Any) -> Any:
        """``Engine.generate`` on the wrapped engine, recorded."""
        completion = self.engine.generate(prompt_ids, sampling=sampling, **options)
        ids = list(completion.token_ids)
        known = completion.logprobs is not None and len(completion.logprobs) == len(ids)
        logprobs = list(completion.logprobs) if known else [math.nan] * len(ids)
        if completion.end_token is not None:
            ids.append(completion.end_token)
            logprobs.append(completion.end_logprob if known and completion.end_logprob is not None else math.nan)
        self.calls.append(GenerationCall(tuple(prompt_ids), tuple(ids), tuple(logprobs)))
        return completion


@dataclass
class Rollout:
    """One sampled research session, ready for the advantage step.

    Attributes:
        group: the question's id (rollouts of one question are normalized together).
        turns: per turn, ``{"kind", "tool", "arguments", "format_errors"}`` (``kind``: ``tool_call``, ``answer``,
            ``malformed``; ``tool`` and ``arguments``: the call that ran, None for a turn without one).
        sequences: the training sequences (usually one).
        rewards: the turn rewards and the outcome (``TurnReward``, turn-indexed).
        boundary_scores: b at each turn's context (None: not scored).
        outcome: the raw outcome reward; ``correct`` whether the answer was judged right.
        failure: why the rollout ended abnormally, or None.
    """

    group: str
    question: str
    answers: tuple[str, ...]
    answer: str | None = None
    termination: str = ""
    turns: list[dict[str, Any]] = field(default_factory=list)
    sequences: list[TrainingSequence] = field(default_factory=list)
    rewards: list[TurnReward] = field(default_factory=list)
    boundary_scores: list[float | None] = field(default_factory=list)
    outcome: float = 0.0
    correct: bool = False
    failure: str | None = None

    @property
    def tool_calls(self) -> int:
        return sum(1 for turn in self.turns if turn["kind"] == "tool_call")

    @property
    def well_formed_turns(self) -> int:
        return sum(1 for turn in self.turns if not turn["format_errors"])


def assemble(calls: Sequence[Any]) -> list[TrainingSequence]:
    """Training sequences from a rollout's recorded calls (``GenerationCall``: prompt_ids, sampled_ids, logprobs).

    Each call's context is the longest prefix it shares with the sequence being built; if that drops more than
    one trained token of the sequence, the sequence is kept whole (cut after its last trained token) and a new one
    continues with the shared prefix as context only, so that no token is trained twice. A single dropped token
    (a sampled stop token the context replaced with ``<|im_end|>``) is left untrained instead.
    """
    sequences: list[TrainingSequence] = []
    current = TrainingSequence()
    for turn, call in enumerate(calls):
        prompt = list(call.prompt_ids)
        shared = 0
        limit = min(len(prompt), len(current.ids))
        while shared < limit and current.ids[shared] == prompt[shared]:
            shared += 1
        if shared < len(current.ids):
            trained = [i for i, t in enumerate(current.turn_of) if t >= 0]
            lost = [i for i in trained if i >= shared]
            # One lost token is a sampled stop token (<tool_response>) that the context replaced with the
            # end-of-turn markup: it goes untrained rather than copying the whole sequence for it.
            if len(lost) > 1:
                sequences.append(current.cut(trained[-1] + 1))
                current = TrainingSequence(current.ids[:shared], [-1] * shared, [0.0] * shared)
            else:
                current = current.cut(shared)
        rest = prompt[shared:]
        current.ids += rest
        current.turn_of += [-1] * len(rest)
        current.old_logprobs += [0.0] * len(rest)
        current.ids += list(call.sampled_ids)
        current.turn_of += [turn] * len(call.sampled_ids)
        current.old_logprobs += list(call.logprobs)
    if current.trained_tokens:
        sequences.append(current)
    return sequences


def outcome_score(answer: str | None, answers: Sequence[str], metric: str | Callable[..., float]) -> float:
    """The outcome reward of an answer: ``em`` (exact match after normalization), ``f1`` (token F1), or a callable
    ``judge(answer, answers) -> float`` (e.g. wrapping ``venus_edge.eval.judge.LLMJudge``). No answer scores 0.

    Raises:
        ValueError: an unknown metric name.
    """
    if callable(metric):
        return float(metric(answer, answers)) if answer is not None else 0.0
    if metric == "em":
        return exact_match(answer, answers)
    if metric == "f1":
        return token_f1(answer, answers)
    raise ValueError(f"outcome metric must be 'em', 'f1' or a callable, got {metric!r}")


def turn_rewards(
    rollout: Rollout,
    calls: Sequence[Any],
    model: Any | None,
    encode: Callable[..., Any] | None,
    *,
    information_gain: bool = True,
    score_after: frozenset[str] | None = frozenset({"visit"}),
    ig_kind: str = "logprob",
    format_penalty: float = -1.0,
) -> list[TurnReward]:
    """The rollout's turn rewards and outcome (PROTOCOL.md, "Training facts"; ``dr_agent_loop.py``).

    The boundary before turn 0 is the baseline; the boundary before turn t >= 1 is scored when turn t-1 called a
    tool in ``score_after`` (None: any tool). IG_t goes to turn t-1. A turn with a format error gets
    ``format_penalty`` in place of its reward. The outcome goes to the last turn, which is the answer turn whatever
    it holds: when it is no well-formed answer the penalty is its outcome. ``information_gain=False`` is the
    outcome-only ablation (format penalties stay).

    Sets ``rollout.boundary_scores`` and returns the rewards.
    """
    turns = rollout.turns
    count = min(len(turns), len(calls))
    scored = [False] * count
    if information_gain and count and model is not None and encode is not None:
        scored[0] = True
        for t in range(1, count):
            previous = turns[t - 1]
            scored[t] = previous["kind"] == "tool_call" and (score_after is None or previous["tool"] in score_after)
    scores: list[float | None] = [None] * count
    if any(scored[1:]) and encode is not None:  # scored only with a model and an encoder
        answer = pseudo_answer(rollout.answers[0], encode)
        final_prompt = list(calls[count - 1].prompt_ids)
        on_final = [t for t in range(count)
                    if scored[t] and list(calls[t].prompt_ids) == final_prompt[:len(calls[t].prompt_ids)]]
        values = score_boundaries(model, final_prompt, [len(calls[t].prompt_ids) for t in on_final], answer)
        for t, value in zip(on_final, values):
            scores[t] = value
        for t in range(count):  # a context that is not a prefix of the last one (rewritten history): scored alone
            if scored[t] and scores[t] is None:
                prompt = list(calls[t].prompt_ids)
                scores[t] = score_boundaries(model, prompt, [len(prompt)], answer)[0]
    rollout.boundary_scores = scores
    gains = information_gains(scores, kind=ig_kind)
    rewards: list[TurnReward] = []
    last = count - 1
    for t in range(count - 1):
        if turns[t]["format_errors"]:
            rewards.append(TurnReward(t, format_penalty, "format_penalty"))
        elif (gain := gains[t + 1]) is not None:
            rewards.append(TurnReward(t, gain, "information_gain"))
    if count:
        # The last turn is the answer turn whatever it holds (the reference checks it as one): a turn that is no
        # well-formed answer (unclosed, a call in the forced final turn) is penalized; an infrastructure failure
        # is not the policy's and keeps outcome 0.
        final = turns[last]
        malformed_answer = rollout.failure is None and (final["kind"] != "answer" or bool(final["format_errors"]))
        rewards.append(TurnReward(last, format_penalty if malformed_answer else rollout.outcome, "outcome"))
    return rewards


def run_rollout(
    engine: Any,
    tools: Sequence[Any],
    question: str,
    answers: Sequence[str],
    *,
    group: str,
    agent_config: Any,
    outcome_metric: str | Callable[..., float] = "em",
    model: Any | None = None,
    encode: Callable[..., Any] | None = None,
    **reward_options: Any,
) -> Rollout:
    """Run one session through ``Agent`` on ``engine`` and return it with its sequences and rewards.

    Args:
        engine: a recording engine (``TransformersEngine``, ``RecordingEngine``); its ``calls`` are reset here.
        tools: the session's tools.
        answers: accepted answers (aliases); the first is scored in the pseudo-answer.
        agent_config: ``AgentConfig`` (``max_retries=1`` keeps malformed turns in the context, as in training).
        model, encode: the policy and its tokenizer's ``__call__``, for the information gain (None: outcome only).
        reward_options: passed to ``turn_rewards``.
    """
    from venus_edge.agent import Agent
    from venus_edge.events import SessionFinished, ToolCalled, TurnCompleted

    if agent_config.max_retries != 1:
        raise ValueError("IGPO rollouts need max_retries=1: a retried turn would shift turns against calls, and "
                         "malformed turns stay in the context with their penalty, as in training")
    engine.reset_calls()
    rollout = Rollout(group=group, question=question, answers=tuple(answers))
    call_of: dict[int, tuple[str, Any]] = {}
    result = None
    try:
        for event in Agent(engine, list(tools), config=agent_config).events(question):
            if isinstance(event, ToolCalled):
                call_of[event.turn] = (event.name, event.arguments)
            elif isinstance(event, TurnCompleted):
                rollout.turns.append({"kind": event.record.kind, "tool": None,
                                      "format_errors": len(event.record.format_errors), "index": event.turn})
            elif isinstance(event, SessionFinished):
                result = event.result
    except Exception as exc:  # an exception out of the loop must not stop training: the rollout scores 0
        rollout.failure = f"{type(exc).__name__}: {exc}"
    for turn in rollout.turns:
        turn["tool"], turn["arguments"] = call_of.get(turn.pop("index"), (None, None))
    calls = engine.reset_calls()
    if result is not None:
        rollout.answer, rollout.termination = result.answer, result.termination
    else:
        rollout.termination = "failed"
    # The turns the agent recorded and the calls the engine saw correspond one to one (max_retries=1); a failure
    # can leave a call without its turn: it is context-free sampling, kept as a malformed turn.
    while len(rollout.turns) < len(calls):
        rollout.turns.append({"kind": "malformed", "tool": None, "arguments": None, "format_errors": 1})
    rollout.outcome = outcome_score(rollout.answer, answers, outcome_metric) if rollout.failure is None else 0.0
    rollout.correct = exact_match(rollout.answer, answers) == 1.0
    rollout.sequences = assemble(calls)
    try:
        rollout.rewards = turn_rewards(rollout, calls, model, encode, **reward_options)
    except Exception as exc:  # scoring failed (e.g. an over-long context): outcome only
        rollout.failure = rollout.failure or f"scoring: {type(exc).__name__}: {exc}"
        rollout.rewards = turn_rewards(rollout, calls, None, None, **reward_options)
    return rollout
