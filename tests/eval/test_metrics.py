"""Answer metrics on hand-computed cases: SQuAD normalization, exact match, token F1, unbiased pass@k."""

from __future__ import annotations

import itertools
import math

import pytest

from venus_edge.eval.metrics import exact_match, normalize_answer, pass_at_k, token_f1


@pytest.mark.parametrize(
    "text, normalized",
    [
        ("The Answer!", "answer"),
        ("  an   apple,  a pear ", "apple pear"),
        ("Python 3.11", "python 3 11"),
        ("“Quoted” — dash…", "quoted dash"),
        ("ＡＢＣ１２３", "abc123"),  # full-width forms fold (NFKC)
        ("ﬁle", "file"),
        ("Theory", "theory"),  # 'the' only as a word
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_takes_the_best_alias():
    assert exact_match("python 3.11.", ["3.11", "Python 3.11"]) == 1.0
    assert exact_match("3.12", ["3.11", "Python 3.11"]) == 0.0
    assert exact_match(None, ["3.11"]) == 0.0
    assert exact_match("", [""]) == 1.0


def test_token_f1_hand_computed():
    # "python 3 11 release" vs "3 11": 2 common tokens; P = 2/4, R = 2/2, F1 = 2PR/(P+R) = 2/3.
    assert token_f1("Python 3.11 release", ["3.11"]) == pytest.approx(2 / 3)
    # best of the aliases: vs "python 3 11" P = 3/4, R = 1, F1 = 6/7.
    assert token_f1("Python 3.11 release", ["3.11", "Python 3.11"]) == pytest.approx(6 / 7)
    # multiset overlap: "a b b" vs "b b c": common b,b; P = R = 2/3.
    assert token_f1("x y y", ["y y z"]) == pytest.approx(2 / 3)
    assert token_f1("nothing shared", ["else"]) == 0.0
    assert token_f1(None, ["x"]) == 0.0
    assert token_f1("the", ["a"]) == 1.0, "both normalize to nothing: equal"


@pytest.mark.parametrize(
    "n, c, k, expected",
    [(5, 2, 1, 0.4), (5, 2, 2, 1 - 3 / 10), (5, 0, 3, 0.0), (5, 5, 1, 1.0), (5, 3, 3, 1.0), (10, 1, 10, 1.0),
     (4, 1, 2, 0.5)],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize("n", [1, 3, 6])
def test_pass_at_k_is_the_chance_that_k_draws_hold_a_correct_one(n):
    """Against the definition: the share of k-subsets of the n samples that contain a correct one."""
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(samples, k))
            exact = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(exact), (n, c, k)


def test_pass_at_k_is_exact_for_many_samples():
    assert pass_at_k(200, 3, 100) == pytest.approx(1 - math.comb(197, 100) / math.comb(200, 100))


@pytest.mark.parametrize("n, c, k", [(3, 4, 1), (3, 1, 4), (3, 1, 0), (0, 0, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)
