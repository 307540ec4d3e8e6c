"""IGPO's formulas on small cases computed by hand: information gain, normalizations, the rescale and its clamp,
discounted returns, broadcasting with the mask, the clipped loss with dual clip, and the KL term."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from venus_edge.train.igpo import (  # noqa: E402
    TurnReward,
    discounted_returns,
    igpo_advantages,
    information_gains,
    low_variance_kl,
    policy_loss,
    turn_advantages,
)


def test_information_gain_is_the_difference_to_the_previous_scored_boundary():
    scores = [-3.0, None, -2.0, -2.5, None]
    assert information_gains(scores) == [None, None, 1.0, -0.5, None]
    prob = information_gains(scores, kind="prob")
    assert prob[:2] == [None, None] and prob[4] is None
    assert prob[2] == pytest.approx(math.exp(-2.0) - math.exp(-3.0))
    assert prob[3] == pytest.approx(math.exp(-2.5) - math.exp(-2.0))
    assert information_gains([None, -1.0, float("nan"), -0.25]) == [None, None, None, 0.75]
    with pytest.raises(ValueError, match="logprob"):
        information_gains([0.0], kind="bits")


def test_discounted_returns_run_backwards_over_rewarded_turns():
    assert discounted_returns([(3, 1.0), (7, 0.0), (10, 2.0)], 0.5) == [(3, 1.5), (7, 1.0), (10, 2.0)]
    assert discounted_returns([(4, -1.0)], 0.95) == [(4, -1.0)]
    assert discounted_returns([], 0.95) == []


def test_each_turn_takes_the_return_of_its_segment():
    # rewards on turns 1 (visit), 3 (visit) and 5 (answer); turns 0 and 2 (searches) share the next reward's value
    assert turn_advantages([(1, 1.5), (3, 1.0), (5, 2.0)], 7) == [1.5, 1.5, 1.0, 1.0, 2.0, 2.0, 0.0]
    with pytest.raises(ValueError, match="out of order or outside"):
        turn_advantages([(3, 1.0), (1, 1.0)], 6)
    with pytest.raises(ValueError, match="outside a rollout of 6"):
        turn_advantages([(6, 1.0)], 6)


def _group():
    """Two rollouts of one question: IG +0.5 then outcome 1; IG -0.5, a format penalty, then outcome 0."""
    return [
        [TurnReward(1, 0.5, "information_gain"), TurnReward(2, 1.0, "outcome")],
        [TurnReward(3, -1.0, "format_penalty"), TurnReward(1, -0.5, "information_gain"), TurnReward(4, 0.0, "outcome")],
    ]


def test_separate_normalization_within_the_group():
    advantages, stats = igpo_advantages(_group(), ["q", "q"], normalization="separate", gamma=1.0)
    # outcomes 1, 0: mean 0.5, std 0.5 -> +-1; turns 0.5, -0.5, -1: mean -1/3, std sqrt(7/18)
    std = math.sqrt(7 / 18)
    o = 0.5 / 0.5
    first_ig, second_ig, penalty = (0.5 + 1 / 3) / std, (-0.5 + 1 / 3) / std, (-1 + 1 / 3) / std
    assert [t for t, _ in advantages[1]] == [1, 3, 4]  # sorted by turn
    assert advantages[0][0][1] == pytest.approx(first_ig + o, rel=1e-5)
    assert advantages[0][1][1] == pytest.approx(o, rel=1e-5)
    assert advantages[1][0][1] == pytest.approx(second_ig + penalty - o, rel=1e-5)
    assert advantages[1][1][1] == pytest.approx(penalty - o, rel=1e-5)
    assert advantages[1][2][1] == pytest.approx(-o, rel=1e-5)
    assert stats.ig_scale == 1.0 and stats.turn_rewards == 3 and stats.outcome_mean == 0.5


def test_scaled_separate_rescales_turn_rewards_by_the_outcome_magnitude():
    advantages, stats = igpo_advantages(_group(), ["q", "q"], gamma=0.0)
    std = math.sqrt(7 / 18)
    turn_abs = (abs(0.5 + 1 / 3) + abs(-0.5 + 1 / 3) + abs(-1 + 1 / 3)) / 3 / std
    scale = 1.0 / turn_abs
    assert stats.ig_scale == pytest.approx(scale, rel=1e-5)
    assert advantages[0][0][1] == pytest.approx((0.5 + 1 / 3) / std * scale, rel=1e-5)
    assert advantages[0][1][1] == pytest.approx(1.0, rel=1e-5)  # gamma 0: no carry-over from the outcome


def test_the_rescale_is_floored_and_capped():
    # identical outcomes normalize to 0: the outcome magnitude is floored at 0.3; tiny IG spread: capped at 10
    rollouts = [[TurnReward(1, 0.2, "information_gain"), TurnReward(2, 1.0, "outcome")],
                [TurnReward(1, -0.2, "information_gain"), TurnReward(2, 1.0, "outcome")]]
    _, stats = igpo_advantages(rollouts, [0, 0], gamma=0.0)
    assert stats.ig_scale == pytest.approx(0.3 / (1.0 / (1.0 + 1e-6) * 0.2 / 0.2), rel=1e-4)
    assert stats.all_same_outcome_groups == 1
    _, capped = igpo_advantages(rollouts, [0, 0], gamma=0.0, scale_floor=50.0)
    assert capped.ig_scale == 10.0


def test_information_gain_changes_only_the_turns_before_the_answer():
    # The outcome-only ablation is the same group without its IG rewards. Under the separate normalizations the
    # answer turn's advantage is the normalized outcome either way: IGPO differs from the ablation only on the
    # research turns. That is why the two cannot differ on a policy whose errors are all in the answer turn.
    ablation = [[r for r in rollout if r.kind != "information_gain"] for rollout in _group()]
    lengths = [3, 5]  # turns of the two rollouts; the answer is the last

    def per_turn(rewards, normalization):
        advantages, _ = igpo_advantages(rewards, ["q", "q"], normalization=normalization)
        return [turn_advantages(a, n) for a, n in zip(advantages, lengths)]

    for normalization in ("scaled_separate", "separate"):
        with_ig, without = per_turn(_group(), normalization), per_turn(ablation, normalization)
        assert [turns[-1] for turns in with_ig] == pytest.approx([turns[-1] for turns in without])
        assert with_ig[0][:2] != pytest.approx(without[0][:2])  # the first rollout's search and visit turns
    # pooled with the turn rewards, the outcome's own advantage moves too
    assert per_turn(_group(), "joint")[0][-1] != pytest.approx(per_turn(ablation, "joint")[0][-1])


@pytest.mark.parametrize("direct_gain, wrong_gain, recovery_gain", [(2.0, -1.0, 3.0), (-2.0, -3.0, 1.0)])
def test_a_detour_s_information_gains_telescope_in_the_discounted_return(direct_gain, wrong_gain, recovery_gain):
    # One rollout visits the right page (IG g); another first opens a wrong page (g1), then the right one (g2), with
    # g1 + g2 = g: the belief ends where the direct visit's ends. Same outcome. The wrong visit's return is
    # (g1 - mu)/sd + gamma (g2 - mu)/sd and the direct visit's (g - mu)/sd: they differ by only
    # (-(1 - gamma) g2 - gamma mu)/sd, so with gamma near 1 the wrong visit is hardly singled out, and when the
    # group's mean IG mu is negative the extra turn even earns a bonus. With gamma 0 each visit keeps its own IG.
    assert wrong_gain + recovery_gain == direct_gain
    direct = [TurnReward(1, direct_gain, "information_gain"), TurnReward(2, 1.0, "outcome")]
    detour = [TurnReward(1, wrong_gain, "information_gain"), TurnReward(2, recovery_gain, "information_gain"),
              TurnReward(3, 1.0, "outcome")]
    gains = [direct_gain, wrong_gain, recovery_gain]
    mu = sum(gains) / 3
    sd = math.sqrt(sum((g - mu) ** 2 for g in gains) / 3 + 1e-8) + 1e-6

    def first_visit_returns(gamma):  # (direct rollout's, detour rollout's) return on turn 1
        (direct_returns, detour_returns), _ = igpo_advantages([direct, detour], ["q", "q"], normalization="separate",
                                                              gamma=gamma)
        return direct_returns[0][1], detour_returns[0][1]

    for gamma in (0.95, 0.0):
        direct_return, wrong_return = first_visit_returns(gamma)
        assert wrong_return - direct_return == pytest.approx((-(1 - gamma) * recovery_gain - gamma * mu) / sd)
    direct_return, wrong_return = first_visit_returns(0.95)
    assert (wrong_return > direct_return) == (mu < 0)
    direct_return, wrong_return = first_visit_returns(0.0)
    assert wrong_return < direct_return  # gamma 0: the wrong page is judged by its own, smaller gain


def test_joint_normalization_pools_every_reward_of_the_group():
    advantages, _ = igpo_advantages(_group(), ["q", "q"], normalization="joint", gamma=0.0)
    values = [0.5, 1.0, -0.5, -1.0, 0.0]
    mean = sum(values) / 5
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 5)
    assert [a for _, a in advantages[0]] == pytest.approx([(0.5 - mean) / std, (1.0 - mean) / std], rel=1e-5)
    assert [a for _, a in advantages[1]] == pytest.approx([(v - mean) / std for v in (-0.5, -1.0, 0.0)], rel=1e-5)


def test_groups_are_normalized_apart_and_a_lone_rollout_keeps_its_sign():
    rollouts = _group() + [[TurnReward(0, 1.0, "outcome")]]
    advantages, stats = igpo_advantages(rollouts, ["q", "q", "other"], normalization="separate", gamma=1.0)
    assert advantages[2] == [(0, pytest.approx(0.0))]  # one rollout: mean subtracted, std 1
    assert advantages[0][1][1] == pytest.approx(1.0, rel=1e-5) and stats.groups == 2


def test_bad_batches_are_refused():
    with pytest.raises(ValueError, match="2 rollouts but 1 group"):
        igpo_advantages(_group(), ["q"])
    with pytest.raises(ValueError, match="normalization must be one of"):
        igpo_advantages(_group(), ["q", "q"], normalization="mean")
    with pytest.raises(ValueError, match="outcome must be its one last reward"):
        igpo_advantages([[TurnReward(2, 1.0, "outcome"), TurnReward(3, 0.1, "information_gain")]], [0])
    with pytest.raises(ValueError, match="two rewards on turn 1"):
        igpo_advantages([[TurnReward(1, 1.0, "format_penalty"), TurnReward(1, 0.1, "information_gain")]], [0])


def test_clipped_loss_with_dual_clip_by_hand():
    old = torch.zeros(4)
    logprobs = torch.log(torch.tensor([1.5, 0.5, 1.0, 5.0])).requires_grad_()
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0])
    loss, stats = policy_loss(logprobs, old, advantages, torch.ones(4), ref_logprobs=None)
    # per token: max(-1.5, -1.2) = -1.2; max(-0.5, -0.8) = -0.5; 1; min(max(5, 1.2), 3) = 3
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 1.0 + 3.0) / 4, rel=1e-6)
    assert stats["clip_fraction"] == 0.25 and stats["dual_clip_fraction"] == 0.25
    loss.backward()
    # gradient flows only where neither clip is active: token 1 (d(-A*ratio)/dlogp = -0.5 / 4) and token 2
    assert logprobs.grad.tolist() == pytest.approx([0.0, -0.5 / 4, 1.0 / 4, 0.0])


def test_the_mask_decides_which_tokens_count():
    logprobs = torch.log(torch.tensor([1.5, 0.5, 1.0, 5.0]))
    masked, stats = policy_loss(logprobs, torch.zeros(4), torch.tensor([1.0, 1.0, -1.0, -1.0]),
                                torch.tensor([1, 1, 0, 0]))
    assert masked.item() == pytest.approx((-1.2 - 0.5) / 2) and stats["tokens"] == 2.0
    with pytest.raises(ValueError, match="same shape"):
        policy_loss(logprobs, torch.zeros(3), torch.zeros(4), torch.ones(4))


def test_low_variance_kl_and_its_weight_in_the_loss():
    logprobs = torch.tensor([math.log(0.25), math.log(0.5)])
    ref = torch.tensor([math.log(0.5), math.log(0.5)])
    kl = low_variance_kl(logprobs, ref)
    assert kl.tolist() == pytest.approx([2.0 - math.log(2.0) - 1.0, 0.0])
    zero = torch.zeros(2)
    loss, stats = policy_loss(logprobs, logprobs, zero, torch.ones(2), ref_logprobs=ref, kl_coef=0.5)
    assert stats["kl"] == pytest.approx((1.0 - math.log(2.0)) / 2)
    assert loss.item() == pytest.approx(0.5 * stats["kl"])
    assert low_variance_kl(torch.tensor([0.0]), torch.tensor([100.0])).item() == 10.0  # clamped
