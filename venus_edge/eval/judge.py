"""An LLM judge in BrowseComp's grading format, run by any ``TextCompleter`` (a local GGUF through
``LlamaCppEngine.complete``, or an OpenAI-compatible endpoint through ``OpenAICompleter``).

The judge reads the question, the agent's response and the correct answer, and writes four fields, as the
BrowseComp grader does (openai/simple-evals ``browsecomp_eval.py``, ``GRADER_TEMPLATE``; our own wording):

    extracted_final_answer: <the final answer found in the response, or None>
    reasoning: <why it matches the correct answer or not>
    correct: yes | no
    confidence: <0-100, the response's own confidence; 100 when it states none>

``parse_verdict`` reads that tolerantly (Markdown bold, other casing, ``=`` for ``:``, a missing confidence); a
reply without a ``correct`` field is no verdict (``JudgeVerdict.correct is None``) and the judge is asked again,
then reported as failed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from venus_edge.engines.base import TextCompleter

__all__ = ["JudgeVerdict", "LLMJudge", "parse_verdict"]

JUDGE_PROMPT = """You grade answers to research questions. Decide whether the response below answers the \
question with the correct answer.

Question: {question}

Response: {response}

Correct answer: {correct_answer}

Write exactly these four lines and nothing else:
extracted_final_answer: the final, exact answer stated in the response, or None if it states none
reasoning: one or two sentences on whether the extracted answer means the same as the correct answer; judge only \
meaningful differences (a number within a small margin, or an equivalent name, still matches); do not solve the \
question yourself
correct: yes if the extracted answer matches the correct answer, otherwise no
confidence: the confidence (0 to 100) that the response states for its answer, or 100 if it states none"""

_FIELD = re.compile(r"^[\s>*#_`-]*(extracted_final_answer|reasoning|correct|confidence)[\s*_`]*[:=]\s*(.*)$",
                    re.IGNORECASE)


@dataclass(frozen=True)
class JudgeVerdict:
    """The judge's reading of one response.

    Attributes:
        correct: True / False, or None when the judge's reply held no verdict.
        extracted_answer: the answer the judge found in the response ('' when it gave none).
        reasoning: the judge's explanation.
        confidence: the response's stated confidence in [0, 1], or None when the reply gave none.
        raw: the judge's reply, verbatim.
    """

    correct: bool | None
    extracted_answer: str
    reasoning: str
    confidence: float | None
    raw: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_verdict(reply: str) -> JudgeVerdict:
    """Read a judge reply in the grading format (see the module docstring); never raises."""
    fields: dict[str, str] = {}
    current = ""
    for line in reply.splitlines():
        match = _FIELD.match(line)
        if match:
            current = match.group(1).lower()
            fields.setdefault(current, match.group(2).strip(" \t*_`"))
        elif current and current in ("reasoning", "extracted_final_answer") and line.strip():
            fields[current] = f"{fields[current]} {line.strip()}".strip()
    verdict = re.match(r"[\s*_`\"']*(yes|no|true|false|correct|incorrect)\b", fields.get("correct", ""), re.IGNORECASE)
    correct = None if verdict is None else verdict.group(1).lower() in ("yes", "true", "correct")
    number = re.search(r"\d+(?:\.\d+)?", fields.get("confidence", ""))
    confidence = min(100.0, float(number.group())) / 100 if number else None
    extracted = fields.get("extracted_final_answer", "").strip("*`\"' ")
    return JudgeVerdict(correct, "" if extracted.lower() == "none" else extracted, fields.get("reasoning", ""),
                        confidence, reply)


class LLMJudge:
    """Grade responses with a model.

    Args:
        completer (`TextCompleter`): the judge model.
        max_tokens (`int`, default `512`): tokens per judge reply.
        attempts (`int`, default `2`): replies asked for while one holds no verdict.
    """

    def __init__(self, completer: TextCompleter, *, max_tokens: int = 512, attempts: int = 2) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self.completer = completer
        self.max_tokens = max_tokens
        self.attempts = attempts

    def __call__(self, question: str, response: str | None, answers: Sequence[str]) -> JudgeVerdict:
        """The verdict on ``response`` (None: no answer, judged incorrect without asking the model)."""
        if response is None or not response.strip():
            return JudgeVerdict(False, "", "the session gave no answer", None, "")
        correct_answer = answers[0] + (f" (also accepted: {'; '.join(answers[1:])})" if len(answers) > 1 else "")
        prompt = JUDGE_PROMPT.format(question=question, response=response, correct_answer=correct_answer)
        verdict = JudgeVerdict(None, "", "", None, "")
        for _ in range(self.attempts):
            verdict = parse_verdict(self.completer.complete([{"role": "user", "content": prompt}],
                                                            max_tokens=self.max_tokens))
            if verdict.correct is not None:
                break
        return verdict
