"""The LLM judge's grading format: parsing well-formed and malformed replies, and asking again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from venus_edge.eval.judge import LLMJudge, parse_verdict


@pytest.mark.parametrize(
    "reply, correct, extracted, confidence",
    [
        ("extracted_final_answer: 3.11\nreasoning: same version\ncorrect: yes\nconfidence: 90", True, "3.11", 0.9),
        (
            "**extracted_final_answer:** Python 3.10\n**reasoning:** differs\n**correct:** no\n**confidence:** 75%",
            False,
            "Python 3.10",
            0.75,
        ),
        ("Extracted_Final_Answer = 4\nReasoning = ok\nCorrect = YES.\n", True, "4", None),
        (
            "- extracted_final_answer: None\n- reasoning: no answer given\n- correct: no\n- confidence: 100",
            False,
            "",
            1.0,
        ),
        (
            "extracted_final_answer: 7\nreasoning: the response says seven\nwhich matches\ncorrect: Yes, it matches\n"
            "confidence: 250",
            True,
            "7",
            1.0,
        ),
        ("extracted_final_answer: 7\ncorrect: incorrect", False, "7", None),
        ("The answer looks right to me.", None, "", None),
        ("extracted_final_answer: 7\nreasoning: unsure\ncorrect: maybe\nconfidence: 50", None, "7", 0.5),
        ("", None, "", None),
    ],
)
def test_parse_verdict(reply, correct, extracted, confidence):
    verdict = parse_verdict(reply)
    assert (verdict.correct, verdict.extracted_answer, verdict.confidence) == (correct, extracted, confidence)
    assert verdict.raw == reply


class Replies:
    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        self.prompts.append(messages[-1]["content"])
        return self.replies.pop(0)


def test_a_judge_without_a_verdict_is_asked_again():
    judge_model = Replies("I think so.", "extracted_final_answer: 3.11\nreasoning: r\ncorrect: yes\nconfidence: 80")
    verdict = LLMJudge(judge_model)("When?", "It was 3.11.", ["3.11", "Python 3.11"])
    assert verdict.correct is True and len(judge_model.prompts) == 2
    prompt = judge_model.prompts[0]
    assert "Question: When?" in prompt and "Response: It was 3.11." in prompt
    assert "Correct answer: 3.11 (also accepted: Python 3.11)" in prompt


def test_a_judge_that_never_gives_a_verdict_is_reported_as_failed():
    verdict = LLMJudge(Replies("hmm", "still unsure"), attempts=2)("q", "a", ["b"])
    assert verdict.correct is None and verdict.raw == "still unsure"


def test_no_answer_is_wrong_without_asking_the_judge():
    judge_model = Replies()
    assert LLMJudge(judge_model)("q", None, ["b"]).correct is False and judge_model.prompts == []
