"""The IGPO algorithm: turn rewards, group-normalized discounted advantages, and the clipped policy loss with KL.

Sources: the paper's recipe as ``shared/PROTOCOL.md`` ("Training facts") states it; where it is silent, the authors'
``RL/verl/trainer/ppo/info_gain_advantage.py`` (normalizations, rescale, discounting), ``RL/verl/utils/reward_score/
info_gain.py`` (reward placement) and ``RL/scrl/llm_agent/dr_agent_loop.py`` (which boundaries are scored) in
inclusionAI/DR-Venus, and verl's ``core_algos.py`` (dual-clip PPO loss, low-variance KL).

A rollout's rewards are ``TurnReward`` values attached to its turns:

- information gain (or a format penalty of -1 for a malformed non-answer turn) to the turn whose tool response
  produced it: in the token sequence, the reward sits on the last token of that response (the ``<|im_end|>``
  closing the observation message), and the boundary scored is the context just after it;
- the outcome (a judge's 1/0, or -1 for a malformed answer turn) to the last turn (its last token).

A reward's segment is every token after the previous reward up to it: the turn it is attached to and any
earlier turns without a reward of their own (e.g. a ``search`` turn when only ``visit`` results are scored).
Attaching rewards to turn indices rather than token positions keeps this exact when a rollout's tokens are split
over more than one training sequence (``igpo_rollout.assemble``).

Everything here is plain arithmetic on lists and tensors; the model-facing parts (scoring the pseudo-answer, the
rollout engine, the update loop) live in ``igpo_scoring`` and ``igpo_trainer``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

__all__ = [
    "NORMALIZATIONS",
    "AdvantageStats",
    "TurnReward",
    "discounted_returns",
    "igpo_advantages",
    "information_gains",
    "low_variance_kl",
    "policy_loss",
    "turn_advantages",
]

RewardKind = Literal["information_gain", "format_penalty", "outcome"]
NORMALIZATIONS = ("scaled_separate", "separate", "joint")
#: The pseudo-answer whose ground-truth tokens are scored at each boundary (PROTOCOL.md; dr_agent_loop.py).
PSEUDO_ANSWER_PREFIX = "Now there's enough information to answer\n</think>\n<answer>\n"
PSEUDO_ANSWER_SUFFIX = "\n</answer><|im_end|>"


@dataclass(frozen=True)
class TurnReward:
    """One reward of a rollout.

    Attributes:
        turn: index of the turn it is attached to (0-based, in the rollout's order).
        value: the reward (nats of information gain, -1 for a format penalty, the outcome score).
        kind: ``information_gain`` and ``format_penalty`` are turn rewards, normalized together; ``outcome`` is
            the rollout's last reward and is normalized on its own (``separate`` modes).
    """

    turn: int
    value: float
    kind: RewardKind

    @property
    def is_outcome(self) -> bool:
        return self.kind == "outcome"


@dataclass(frozen=True)
class AdvantageStats:
    """What the advantage step did, for the progress line and the metrics file."""

    ig_scale: float
    outcome_mean: float
    turn_reward_mean: float
    turn_rewards: int
    all_same_outcome_groups: int
    groups: int

    def to_dict(self) -> dict[str, float]:
        return {"ig_scale": round(self.ig_scale, 6), "outcome_mean": round(self.outcome_mean, 6),
                "turn_reward_mean": round(self.turn_reward_mean, 6), "turn_rewards": self.turn_rewards,
                "all_same_outcome_groups": self.all_same_outcome_groups, "groups": self.groups}


def information_gains(boundary_scores: Sequence[float | None], *, kind: str = "logprob") -> list[float | None]:
    """Information gain at each scored boundary from the boundaries' ground-truth scores.

    ``boundary_scores[i]`` is b_i, the mean log-probability of the ground-truth tokens of the pseudo-answer
    appended to the context at boundary i (None: boundary not scored). The first scored boundary is the baseline
    (the prompt alone); each later scored boundary gets IG_i = f(b_i) - f(b_prev) where b_prev is the previous
    scored boundary and f is the identity (``logprob``, DR-Venus) or exp (``prob``, the original IGPO).

    Returns:
        a list as long as ``boundary_scores``: None where not scored and at the baseline.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in ("logprob", "prob"):
        raise ValueError(f"information gain kind must be 'logprob' or 'prob', got {kind!r}")
    gains: list[float | None] = []
    previous: float | None = None
    for score in boundary_scores:
        if score is None or not math.isfinite(score):
            gains.append(None)
            continue
        value = score if kind == "logprob" else math.exp(score)
        gains.append(None if previous is None else value - previous)
        previous = value
    return gains


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population std (sqrt(var + 1e-8)); one value or none has std 1 (info_gain_advantage.py)."""
    if not values:
        return 0.0, 1.0
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, 1.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values) + 1e-8)


def igpo_advantages(
    rewards: Sequence[Sequence[TurnReward]],
    groups: Sequence[Hashable],
    *,
    normalization: str = "scaled_separate",
    gamma: float = 0.95,
    epsilon: float = 1e-6,
    scale_floor: float = 0.3,
    scale_cap: float = 10.0,
    reduce_sums: Callable[[list[float]], list[float]] | None = None,
) -> tuple[list[list[tuple[int, float]]], AdvantageStats]:
    """Group-normalize the rewards of a batch of rollouts and turn them into discounted turn advantages.

    Args:
        rewards: per rollout, its rewards (at most one outcome, on the last rewarded turn).
        groups: per rollout, the id of its group (the rollouts of one question).
        normalization: ``separate``: outcomes and turn rewards each normalized within the group,
            (x - mean) / (std + epsilon); ``scaled_separate`` (DR-Venus): as ``separate``, then the turn rewards
            are multiplied by s = min(scale_cap, max(scale_floor, mean|O|) / (mean|I| + epsilon)), the means over
            the whole batch; ``joint``: all rewards of a group normalized together.
        gamma: discount between consecutive rewarded turns of a rollout.
        reduce_sums: with the batch spread over processes (each holding whole groups), the sum of a list of
            numbers over every process, element-wise (an all-reduce that every process calls once per call here,
            even with no rollout); the batch-level means (``scaled_separate``'s mean|O| and mean|I|) and the
            statistics are then those of the whole batch. None: ``rewards`` is the whole batch.

    Returns:
        per rollout, ``(turn, advantage)`` for each rewarded turn in order (see ``discounted_returns``), and the
        step's statistics.

    Raises:
        ValueError: lengths differ, an unknown normalization, or a rollout whose outcome is not its last reward.
    """
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rollouts but {len(groups)} group ids")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    ordered = [sorted(r, key=lambda reward: reward.turn) for r in rewards]
    for index, rollout in enumerate(ordered):
        outcomes = [i for i, reward in enumerate(rollout) if reward.is_outcome]
        if outcomes and outcomes != [len(rollout) - 1]:
            raise ValueError(f"rollout {index}: the outcome must be its one last reward")
        turns = [reward.turn for reward in rollout]
        if len(set(turns)) != len(turns):
            raise ValueError(f"rollout {index}: two rewards on turn {next(t for t in turns if turns.count(t) > 1)}")
    members: dict[Hashable, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)

    normalized: list[list[float]] = [[0.0] * len(r) for r in ordered]
    same_outcome = 0
    for indices in members.values():
        outcome_values = [r.value for i in indices for r in ordered[i] if r.is_outcome]
        turn_values = [r.value for i in indices for r in ordered[i] if not r.is_outcome]
        if normalization == "joint":
            stats = {True: _mean_std(outcome_values + turn_values), False: _mean_std(outcome_values + turn_values)}
        else:
            stats = {True: _mean_std(outcome_values), False: _mean_std(turn_values)}
        if len(outcome_values) > 1 and max(outcome_values) - min(outcome_values) < 1e-6:
            same_outcome += 1
        for i in indices:
            for j, reward in enumerate(ordered[i]):
                mean, std = stats[reward.is_outcome]
                normalized[i][j] = (reward.value - mean) / (std + epsilon)

    outcome_norm = [normalized[i][j] for i, r in enumerate(ordered) for j, x in enumerate(r) if x.is_outcome]
    turn_norm = [normalized[i][j] for i, r in enumerate(ordered) for j, x in enumerate(r) if not x.is_outcome]
    raw_outcomes = [r.value for rollout in ordered for r in rollout if r.is_outcome]
    raw_turns = [r.value for rollout in ordered for r in rollout if not r.is_outcome]
    # Sums and counts, not means, so that the batch's figures are the same however it is split over processes.
    sums: list[float] = [sum(map(abs, outcome_norm)), len(outcome_norm), sum(map(abs, turn_norm)), len(turn_norm),
            sum(raw_outcomes), len(raw_outcomes), sum(raw_turns), len(raw_turns), same_outcome, len(members)]
    if reduce_sums is not None:
        sums = list(reduce_sums(sums))
    (outcome_abs_sum, outcome_count, turn_abs_sum, turn_count, outcome_sum, raw_outcome_count, turn_sum,
     raw_turn_count, same_outcome_groups, group_count) = sums
    scale = 1.0
    if normalization == "scaled_separate":
        outcome_abs = max(scale_floor, outcome_abs_sum / outcome_count) if outcome_count else 1.0
        turn_abs = turn_abs_sum / turn_count if turn_count else 1.0
        scale = min(scale_cap, outcome_abs / (turn_abs + epsilon))
        for i, rollout in enumerate(ordered):
            for j, reward in enumerate(rollout):
                if not reward.is_outcome:
                    normalized[i][j] *= scale

    advantages = [discounted_returns([(r.turn, v) for r, v in zip(rollout, values)], gamma)
                  for rollout, values in zip(ordered, normalized)]
    advantage_stats = AdvantageStats(
        ig_scale=scale,
        outcome_mean=outcome_sum / raw_outcome_count if raw_outcome_count else 0.0,
        turn_reward_mean=turn_sum / raw_turn_count if raw_turn_count else 0.0,
        turn_rewards=round(raw_turn_count),
        all_same_outcome_groups=round(same_outcome_groups),
        groups=round(group_count),
    )
    return advantages, advantage_stats


def discounted_returns(rewards: Sequence[tuple[int, float]], gamma: float) -> list[tuple[int, float]]:
    """Backward discounted sum over a rollout's rewards: A_k = r_k + gamma * A_{k+1}.

    Args:
        rewards: ``(turn, reward)`` in increasing turn order.

    Returns:
        ``(turn, A_k)`` in the same order.
    """
    returns: list[tuple[int, float]] = []
    following = 0.0
    for turn, reward in reversed(rewards):
        following = reward + gamma * following
        returns.append((turn, following))
    returns.reverse()
    return returns


def turn_advantages(returns: Sequence[tuple[int, float]], turns: int) -> list[float]:
    """Each turn's advantage: the return of its segment, i.e. of the first rewarded turn at or after it; turns
    after the last reward get 0. Every trained token of a turn carries its turn's value; tool-response tokens are
    never trained (``igpo_rollout.assemble``).

    Args:
        returns: ``(turn, A_k)`` in increasing turn order, from ``discounted_returns``.
        turns: the rollout's number of turns.

    Raises:
        ValueError: a turn out of range or out of order.
    """
    values = [0.0] * turns
    start = 0
    for turn, value in returns:
        if not start <= turn < turns:
            raise ValueError(f"rewarded turn {turn} is out of order or outside a rollout of {turns} turns")
        values[start:turn + 1] = [value] * (turn + 1 - start)
        start = turn + 1
    return values


def low_variance_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || reference): exp(r) - r - 1 with r = ref - policy log-prob, r clamped to
    [-20, 20] and the estimate to [-10, 10] (Schulman's k3; verl ``kl_penalty(..., "low_var_kl")``)."""
    import torch

    log_ratio = torch.clamp(ref_logprobs - logprobs, -20.0, 20.0)
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1.0, -10.0, 10.0)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float = 0.2,
    clip_high: float | None = None,
    dual_clip: float = 3.0,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.001,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip loss with dual clip and a low-variance KL term, token-mean over ``mask``.

    Per token, with ratio = exp(logprobs - old_logprobs): L = max(-A * ratio, -A * clip(ratio, 1 - clip, 1 +
    clip_high)); for A < 0 it is further capped at -A * dual_clip (Ye et al. 2020, verl ``compute_policy_loss``). The
    loss is mean(L) + kl_coef * mean(KL) over masked tokens of the whole batch.

    Args:
        logprobs, old_logprobs, advantages, mask: same shape, (batch, seq_len) or (seq_len,); ``logprobs`` carries
            the gradient; ``mask`` is 1 on trained tokens.
        ref_logprobs: the frozen reference's log-probs (None: no KL term).

    Returns:
        the scalar loss and statistics: ``pg_loss``, ``kl``, ``clip_fraction``, ``dual_clip_fraction``,
        ``ratio_mean``, ``tokens``.

    Raises:
        ValueError: shapes differ, or ``dual_clip`` is not above 1.
    """
    import torch

    if not (logprobs.shape == old_logprobs.shape == advantages.shape == mask.shape):
        raise ValueError("logprobs, old_logprobs, advantages and mask must have the same shape")
    if dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    high = clip if clip_high is None else clip_high
    weights = mask.to(logprobs.dtype)
    tokens = weights.sum().clamp(min=1.0)
    ratio = torch.exp(torch.clamp(logprobs - old_logprobs, -20.0, 20.0))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + high)
    per_token = torch.maximum(unclipped, clipped)
    capped = torch.minimum(per_token, -advantages * dual_clip)
    per_token_loss = torch.where(advantages < 0, capped, per_token)
    pg_loss = (per_token_loss * weights).sum() / tokens
    loss = pg_loss
    kl_value = 0.0
    if ref_logprobs is not None:
        kl = (low_variance_kl(logprobs, ref_logprobs) * weights).sum() / tokens
        loss = loss + kl_coef * kl
        kl_value = kl.item()
    with torch.no_grad():
        stats = {
            "pg_loss": pg_loss.item(),
            "kl": kl_value,
            "clip_fraction": float(((clipped > unclipped).to(weights.dtype) * weights).sum() / tokens),
            "dual_clip_fraction": float(
                (((advantages < 0) & (per_token > capped)).to(weights.dtype) * weights).sum() / tokens
            ),
            "ratio_mean": float((ratio * weights).sum() / tokens),
            "tokens": float(weights.sum()),
        }
    return loss, stats
