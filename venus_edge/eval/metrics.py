"""Answer metrics: normalization, exact match, token F1, and the unbiased pass@k estimator.

Normalization is SQuAD's (``evaluate-v1.1.py``, as used by Search-R1 and DR-Venus's ``format_and_f1.py``):
lower case, punctuation removed, the articles a/an/the removed, whitespace collapsed; we also apply Unicode
NFKC first, so full-width digits and ligatures compare equal. A prediction is scored against every accepted
answer and the best score counts.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable

__all__ = ["exact_match", "normalize_answer", "pass_at_k", "token_f1"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation) | {
    "“",
    "”",
    "‘",
    "’",
    "«",
    "»",
    "–",
    "—",
    "…",
    "·",
    "、",
    "。",
    "，",
    "：",
    "；",
}


def normalize_answer(text: str) -> str:
    """NFKC, lower case, punctuation and articles removed, whitespace collapsed (SQuAD ``normalize_answer``)."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if char in _PUNCTUATION else char for char in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str | None, answers: Iterable[str]) -> float:
    """1.0 when the normalized prediction equals a normalized accepted answer, else 0.0 (None scores 0)."""
    if prediction is None:
        return 0.0
    normalized = normalize_answer(prediction)
    return float(any(normalized == normalize_answer(answer) for answer in answers))


def token_f1(prediction: str | None, answers: Iterable[str]) -> float:
    """The best token-level F1 (harmonic mean of token precision and recall, multiset overlap) against the
    accepted answers, after normalization. Source: SQuAD ``f1_score``."""
    if prediction is None:
        return 0.0
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        truth = normalize_answer(answer).split()
        common = sum((Counter(predicted) & Counter(truth)).values())
        if not predicted or not truth:
            best = max(best, float(predicted == truth))
            continue
        if common:
            precision, recall = common / len(predicted), common / len(truth)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``
    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1), computed as a product so it
    stays exact for large ``n``.

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_ks(per_question: Iterable[tuple[int, int]], k: int) -> dict[str, float]:
    """Mean unbiased pass@j over questions, for j = 1, 2, 4, ... and k, from (samples, correct) pairs."""
    pairs = list(per_question)
    js = sorted({j for j in (1, 2, 4, 8, 16, 32, 64) if j <= k} | {k})
    return {f"pass@{j}": round(sum(pass_at_k(n, c, j) for n, c in pairs) / len(pairs), 4) for j in js}
