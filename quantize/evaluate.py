"""Quality gates for GGUF files: parity with the HF checkpoint, quant vs reference, and an agentic check.

- `compare_to_hf`: the GGUF in llama.cpp (F32 KV cache) against the checkpoint in transformers: max abs logit
  difference on one short text, and token ids of llama.cpp's tokenizer (with the runtime's NFC step for Qwen
  vocabularies) against the HF tokenizer on every text.
- `compare_quant`: a quantized GGUF against its F16/F32 reference on a calibration text: mean KL divergence
  KL(reference || quant) per token, top-1 agreement, perplexity of each and their ratio, the worst positions.
  This is what llama.cpp's `llama-perplexity --kl-divergence` reports (tools/perplexity/perplexity.cpp).
- `agentic_check`: fixed DR-Venus protocol prompts decoded greedily by the runtime's `LlamaCppEngine`,
  counting turns that fail `venus_edge.protocol.parse_turn(...).well_formed`.
- `VerificationTable`: one row per file, as Markdown or JSON.

torch and transformers are imported inside `compare_to_hf` only.

Usage::

    quant = compare_quant("model-q4_k_m.gguf", "model-f16.gguf", CALIBRATION_TEXT)
    print(quant.mean_kl, quant.top1_agreement, quant.ppl_ratio)
"""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from venus_edge.text import finite_json

if TYPE_CHECKING:  # imported at run time inside the functions that load a model
    import llama_cpp

__all__ = [
    "AGENTIC_PROMPTS",
    "CALIBRATION_TEXT",
    "PARITY_TEXTS",
    "AgenticReport",
    "HFParityReport",
    "QuantComparison",
    "VerificationRow",
    "VerificationTable",
    "WorstPosition",
    "agentic_check",
    "compare_quant",
    "compare_to_hf",
]

#: Mixed texts for tokenization parity: prose, code, Markdown, CJK, emoji, NFC/NFD forms, whitespace runs.
PARITY_TEXTS: tuple[str, ...] = (
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n        pass\n",
    "# Title\n\n- item **bold** and `code`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
    "深度研究助手会交叉核对多个来源。日本語のテキストも。한국어 문장.",
    "emoji 🙂👍🏽 family 👨‍👩‍👧 flags 🇫🇷",
    "caf\u00e9 vs cafe\u0301, \u00c5ngstr\u00f6m vs A\u030angstro\u0308m",
    "tabs\t\tand    many        spaces" + " " * 40 + "end\n\n\n\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n",
)

#: Default calibration text (ordinary English prose and a little code) for `compare_quant`.
CALIBRATION_TEXT = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
    "movable metal type, oil-based ink and a wooden screw press into a system that could produce books at a "
    "scale no scribe could match. Within fifty years, presses operated in more than two hundred European "
    "cities, and the price of books fell sharply. Historians still debate how quickly literacy followed, "
    "but the spread of printed pamphlets during the Reformation shows that ideas could now travel faster "
    "than any authority could suppress them.\n\n"
    "def mean(values):\n    \"\"\"Arithmetic mean of a non-empty list.\"\"\"\n    return sum(values) / len(values)\n\n"
    "In physics, the speed of light in vacuum is exactly 299,792,458 metres per second, a value fixed by the "
    "definition of the metre since 1983. Measurements of distance therefore reduce to measurements of time."
)


# ---------------------------------------------------------------------------------------------- llama.cpp


def _load_llama(gguf_path: Path, n_ctx: int, *, logits_all: bool = True) -> llama_cpp.Llama:
    """A `llama_cpp.Llama` with an F32 KV cache (type_k = type_v = 0, GGML_TYPE_F32) so only weights differ."""
    import llama_cpp

    from venus_edge.engines.llama_load import failure_reason, llama_diagnostics
    from venus_edge.errors import ModelLoadError
    from venus_edge.memory.header import read_model_header

    from .errors import GGUFReadError
    from .gguf_info import read_gguf_header

    read_gguf_header(gguf_path)  # a clear error with the path for corrupt or truncated files
    try:
        read_model_header(gguf_path)  # dimensions bounded and checked against the tensors before llama.cpp
    except ModelLoadError as error:
        raise GGUFReadError(gguf_path, error.reason) from error
    with llama_diagnostics(gguf_path) as errors:
        try:
            return llama_cpp.Llama(
                model_path=str(gguf_path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=logits_all,
                type_k=0, type_v=0, verbose=False,
            )
        except (ValueError, RuntimeError) as error:
            raise GGUFReadError(gguf_path, f"llama.cpp could not load it: {failure_reason(error, errors)}") from error


def _llama_tokenize(llm: llama_cpp.Llama, text: str) -> list[int]:
    """Token ids as the runtime computes them (`venus_edge.engines.vocab.tokenizer_normalize` first)."""
    from venus_edge.engines.vocab import tokenizer_normalize

    return llm.tokenize(tokenizer_normalize(text, llm.metadata).encode("utf-8"), add_bos=False, special=True)


def _llama_logits(llm: llama_cpp.Llama, token_ids: Sequence[int]) -> np.ndarray:
    """(T, vocab) float32 logits of every position, from one fresh evaluation (off the main thread:
    `venus_edge.engines.llama_cpp.off_main_thread`)."""
    from venus_edge.engines.llama_cpp import off_main_thread

    def evaluate() -> np.ndarray:
        llm.reset()
        llm.eval(list(token_ids))
        return np.array(llm.scores[: len(token_ids)], dtype=np.float32)

    return off_main_thread(evaluate)


def _logsumexp(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-sum-exp, (T, vocab) float32 -> (T, 1) float64 (exp in float32, sums in float64)."""
    row_max = logits.max(axis=-1, keepdims=True)
    sums = np.exp(logits - row_max).sum(axis=-1, keepdims=True, dtype=np.float64)
    result: np.ndarray = row_max.astype(np.float64) + np.log(sums)
    return result


def _kl_per_position(reference: np.ndarray, quant: np.ndarray) -> np.ndarray:
    """KL(p_ref || p_quant) per row, in nats. Shapes: (T, vocab) logits each -> (T,).

    Naive equivalent: ``(softmax(r) * (log_softmax(r) - log_softmax(q))).sum(-1)``; this form keeps the logit
    difference in float32 (where it is exact enough) and the normalizers in float64.
    """
    lse_reference, lse_quant = _logsumexp(reference), _logsumexp(quant)
    p_reference = np.exp(reference - lse_reference.astype(np.float32))
    log_ratio = (reference - quant) - (lse_reference - lse_quant).astype(np.float32)
    kl: np.ndarray = np.maximum((p_reference * log_ratio).sum(axis=-1, dtype=np.float64), 0.0)
    return kl


# ---------------------------------------------------------------------------------------------- HF parity


@dataclass(frozen=True)
class HFParityReport:
    """`compare_to_hf`'s result.

    Attributes:
        max_abs_logit_diff: max |llama.cpp - transformers| over the (T, vocab) logits of `logit_tokens` tokens.
        argmax_agreement: fraction of the T positions where both pick the same next token.
        tokenization_mismatches: the texts whose ids differ, with both id lists.
    """

    gguf_path: str
    logit_tokens: int
    max_abs_logit_diff: float
    argmax_agreement: float
    n_texts: int
    tokenization_mismatches: tuple[dict[str, Any], ...] = ()

    @property
    def tokenization_match(self) -> bool:
        return not self.tokenization_mismatches


def compare_to_hf(
    gguf_path: str | Path,
    checkpoint_dir: str | Path,
    texts: Sequence[str] = PARITY_TEXTS,
    *,
    max_logit_tokens: int = 64,
) -> HFParityReport:
    """Compare a GGUF with the HF checkpoint it came from: logits (F32 KV cache) and tokenization.

    Args:
        gguf_path: the converted file.
        checkpoint_dir: the HF checkpoint folder (config.json, safetensors, tokenizer files).
        texts: tokenization parity set; the logits use the first text, cut to `max_logit_tokens` tokens.
    Returns:
        an HFParityReport.
    Raises:
        GGUFReadError: the GGUF is corrupt, truncated or refused by llama.cpp.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, checkpoint_dir = Path(gguf_path), Path(checkpoint_dir)
    hf_tokenizer = AutoTokenizer.from_pretrained(checkpoint_dir)
    logit_ids = hf_tokenizer.encode(texts[0], add_special_tokens=False)[:max_logit_tokens]
    llm = _load_llama(gguf_path, n_ctx=max(64, len(logit_ids)))
    try:
        mismatches = []
        for text in texts:
            ours, theirs = _llama_tokenize(llm, text), hf_tokenizer.encode(text, add_special_tokens=False)
            if ours != theirs:
                mismatches.append({"text": text, "llama_cpp": ours, "hf": theirs})
        gguf_logits = _llama_logits(llm, logit_ids)
    finally:
        llm.close()
    model = AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        hf_logits = model(torch.tensor([logit_ids])).logits[0].float().numpy()
    return HFParityReport(
        gguf_path=str(gguf_path),
        logit_tokens=len(logit_ids),
        max_abs_logit_diff=float(np.abs(gguf_logits - hf_logits).max()),
        argmax_agreement=float((gguf_logits.argmax(-1) == hf_logits.argmax(-1)).mean()),
        n_texts=len(texts),
        tokenization_mismatches=tuple(mismatches),
    )


# ---------------------------------------------------------------------------------------------- quant vs ref


@dataclass(frozen=True)
class WorstPosition:
    """A calibration position where the quant departs most from the reference."""

    position: int  # index of the predicting token in the calibration ids
    kl: float  # KL(reference || quant) at this position, nats
    context: str  # the last few tokens of text up to and including this position
    reference_top: str  # the reference's most likely next token
    quant_top: str  # the quant's most likely next token


@dataclass(frozen=True)
class QuantComparison:
    """`compare_quant`'s result. KL in nats per token; perplexities over the next-token predictions.

    Source: the KL / top-1 / perplexity-ratio statistics of llama.cpp's `llama-perplexity --kl-divergence`.
    """

    quant_path: str
    reference_path: str
    n_tokens: int
    mean_kl: float
    max_kl: float
    top1_agreement: float
    ppl_reference: float
    ppl_quant: float
    worst: tuple[WorstPosition, ...] = ()

    @property
    def ppl_ratio(self) -> float:
        """ppl(quant) / ppl(reference); 1.0 means no loss."""
        return self.ppl_quant / self.ppl_reference


def _perplexity(logits: np.ndarray, token_ids: Sequence[int]) -> float:
    """exp of the mean negative log-likelihood of token t+1 given positions <= t. logits: (T, vocab)."""
    targets = np.asarray(token_ids[1:])
    rows = np.arange(len(targets))
    nll = _logsumexp(logits[rows])[:, 0] - logits[rows, targets]
    return float(np.exp(nll.mean()))


def compare_quant(
    quant_gguf: str | Path,
    reference_gguf: str | Path,
    calibration_text: str = CALIBRATION_TEXT,
    *,
    n_ctx: int = 256,
    n_worst: int = 5,
) -> QuantComparison:
    """KL divergence, top-1 agreement and perplexity ratio of a quant against its reference GGUF.

    Both models see the same ids (the reference's tokenization of `calibration_text`, cut to `n_ctx`), with
    F32 KV caches, one model loaded at a time (logits_all needs n_ctx x vocab floats each).

    Args:
        quant_gguf: the quantized file.
        reference_gguf: the F16 (or F32) file it was made from.
        calibration_text: text to score; at least 2 tokens.
        n_ctx: tokens scored at most.
        n_worst: how many highest-KL positions to report.
    Raises:
        GGUFReadError: a file is corrupt or refused by llama.cpp; ValueError: fewer than 2 tokens.
    """
    quant_gguf, reference_gguf = Path(quant_gguf), Path(reference_gguf)
    llm = _load_llama(reference_gguf, n_ctx)
    try:
        token_ids = _llama_tokenize(llm, calibration_text)[:n_ctx]
        if len(token_ids) < 2:
            raise ValueError(f"the calibration text has {len(token_ids)} tokens; at least 2 are needed")
        reference = _llama_logits(llm, token_ids)
        pieces = [llm.detokenize([t]).decode("utf-8", errors="replace") for t in token_ids]

        def vocab_piece(token_id: int) -> str:
            return llm.detokenize([int(token_id)]).decode("utf-8", errors="replace")

        reference_top = [vocab_piece(t) for t in reference.argmax(-1)]
    finally:
        llm.close()
    gc.collect()
    llm = _load_llama(quant_gguf, n_ctx)
    try:
        quant = _llama_logits(llm, token_ids)
        quant_top = [llm.detokenize([int(t)]).decode("utf-8", errors="replace") for t in quant.argmax(-1)]
    finally:
        llm.close()
    kl = _kl_per_position(reference, quant)  # (T,)
    worst = [
        WorstPosition(int(p), float(kl[p]), "".join(pieces[max(0, p - 7) : p + 1]), reference_top[p], quant_top[p])
        for p in np.argsort(-kl)[:n_worst]
    ]
    return QuantComparison(
        quant_path=str(quant_gguf),
        reference_path=str(reference_gguf),
        n_tokens=len(token_ids),
        mean_kl=float(kl.mean()),
        max_kl=float(kl.max()),
        top1_agreement=float((reference.argmax(-1) == quant.argmax(-1)).mean()),
        ppl_reference=_perplexity(reference, token_ids),
        ppl_quant=_perplexity(quant, token_ids),
        worst=tuple(worst),
    )


# ---------------------------------------------------------------------------------------------- agentic


#: Fixed protocol situations: (name, user question, earlier turns as (assistant content, observation text)).
AGENTIC_PROMPTS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("first_turn", "When was the tomllib module added to the Python standard library?", ()),
    ("multi_hop", "Who designed the language in which the first web browser was written?", ()),
    (
        "after_search",
        "What is the default pickle protocol in Python 3.11?",
        ((
            '<think>\nI should search the docs.\n</think>\n\n<tool_call>\n{"name": "search", "arguments": '
            '{"query": ["default pickle protocol python 3.11"]}}\n</tool_call>',
            "A search for 'default pickle protocol python 3.11' found 1 result:\n1. [pickle - Python object "
            "serialization](https://docs.python.org/3/library/pickle.html)\nThe default protocol is 4 ...",
        ),),
    ),
    ("answer_now", "Give the speed of light in vacuum in metres per second. Answer directly.", ()),
)


@dataclass(frozen=True)
class AgenticReport:
    """`agentic_check`'s result: per prompt, whether the greedy turn passed the strict format check."""

    gguf_path: str
    n_prompts: int
    n_failed: int
    results: tuple[dict[str, Any], ...] = ()  # {"name", "well_formed", "kind", "errors": [codes], "text"}


def _agentic_messages(question: str, history: Sequence[tuple[str, str]], today: str) -> list[dict[str, str]]:
    from venus_edge.protocol import observation, render_system_prompt
    from venus_edge.tools.search import SEARCH_SCHEMA
    from venus_edge.tools.visit import VISIT_SCHEMA

    messages = [
        {"role": "system", "content": render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], today)},
        {"role": "user", "content": question},
    ]
    for assistant, observed in history:
        messages += [{"role": "assistant", "content": assistant}, {"role": "user", "content": observation(observed)}]
    return messages


def agentic_check(
    gguf_path: str | Path,
    prompts: Sequence[tuple[str, str, Sequence[tuple[str, str]]]] = AGENTIC_PROMPTS,
    *,
    max_tokens: int = 16,
    n_ctx: int = 2048,
    today: str = "2025-06-01",
) -> AgenticReport:
    """Decode one greedy turn per protocol prompt with the runtime engine and count malformed turns.

    Args:
        gguf_path: the model.
        prompts: (name, question, earlier (assistant content, observation) pairs); `AGENTIC_PROMPTS` by default.
        max_tokens: new tokens per turn (a turn cut by the limit usually fails the check).
        n_ctx: the engine's context window.
        today: the system prompt's date line, fixed so the check is deterministic.
    Raises:
        ModelNotFoundError, ModelLoadError (venus_edge.errors): the file is missing or refused.
    """
    from venus_edge.engines.base import GREEDY
    from venus_edge.engines.llama_cpp import LlamaCppEngine
    from venus_edge.protocol import STOP_STRINGS, action_complete, assistant_content, parse_turn, render_messages

    sampling = dataclasses.replace(GREEDY, max_tokens=max_tokens)
    tool_names = ("search", "visit")
    results = []
    with LlamaCppEngine(gguf_path, n_ctx=n_ctx, n_threads=None) as engine:
        for name, question, history in prompts:
            prompt = render_messages(_agentic_messages(question, history, today))
            completion = engine.generate(
                engine.tokenize(prompt), sampling=sampling, stop=STOP_STRINGS, stop_text_if=action_complete
            )
            turn = parse_turn(assistant_content(completion.text), tool_names)
            results.append({
                "name": name, "well_formed": turn.well_formed, "kind": turn.kind,
                "errors": [error.code for error in turn.errors], "text": completion.text,
            })
    return AgenticReport(str(gguf_path), len(results), sum(not r["well_formed"] for r in results), tuple(results))


# ---------------------------------------------------------------------------------------------- table


@dataclass
class VerificationRow:
    """One verified file. Fields left None were not measured for this file."""

    file: str
    file_type: str
    size_bytes: int
    mean_kl: float | None = None
    top1_agreement: float | None = None
    ppl: float | None = None
    ppl_ratio: float | None = None
    max_abs_logit_diff: float | None = None  # against the HF checkpoint
    tokenization_match: bool | None = None
    agentic_failed: int | None = None
    agentic_total: int | None = None
    fallbacks: list[str] = field(default_factory=list)  # "tensor: expected -> actual"


_COLUMNS = (  # (header, attribute, format)
    ("file", "file", "{}"), ("type", "file_type", "{}"), ("size MiB", "size_bytes", "{:.1f}"),
    ("mean KL", "mean_kl", "{:.2e}"), ("top-1", "top1_agreement", "{:.3f}"), ("ppl", "ppl", "{:.4g}"),
    ("ppl ratio", "ppl_ratio", "{:.4f}"), ("max abs dlogit vs HF", "max_abs_logit_diff", "{:.2e}"),
    ("tokens = HF", "tokenization_match", "{}"), ("agentic fails", "agentic_failed", "{}"),
    ("fallbacks", "fallbacks", "{}"),
)


def _cell(row: VerificationRow, attribute: str, fmt: str) -> str:
    value = getattr(row, attribute)
    if attribute == "size_bytes":
        value = value / 2**20
    if attribute == "agentic_failed" and value is not None:
        return f"{value}/{row.agentic_total}"
    if attribute == "fallbacks":
        return str(len(value))
    return "—" if value is None else fmt.format(value)


@dataclass
class VerificationTable:
    """The verification results of one pipeline run: one row per GGUF file, against `reference`."""

    reference: str
    calibration_tokens: int | None = None
    rows: list[VerificationRow] = field(default_factory=list)

    def to_markdown(self) -> str:
        """A GitHub Markdown table, then the list of fallback tensors if any."""
        lines = [
            f"Reference: `{self.reference}`"
            + (f"; calibration {self.calibration_tokens} tokens" if self.calibration_tokens else ""),
            "",
            "| " + " | ".join(header for header, _, _ in _COLUMNS) + " |",
            "|" + "|".join("---" for _ in _COLUMNS) + "|",
        ]
        lines += ["| " + " | ".join(_cell(row, a, f) for _, a, f in _COLUMNS) + " |" for row in self.rows]
        for row in self.rows:
            if row.fallbacks:
                lines += ["", f"Fallbacks in {row.file}: " + ", ".join(row.fallbacks)]
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        """The table as JSON: {"reference", "calibration_tokens", "rows": [{field: value}]}."""
        # a NaN figure (a model that does not run) is null: json.dumps would write NaN, which strict readers refuse
        return json.dumps(finite_json(dataclasses.asdict(self)), indent=2, ensure_ascii=False) + "\n"
