"""Trajectories for verl: the cleaned SFT data and the RL question set as the parquet files verl's trainers read.

    venus-edge train clean runs/*.jsonl --out sft.jsonl --resample
    venus-edge train export-verl --sft sft.jsonl --questions questions.jsonl --out verl-data/

Columns are those verl documents (volcengine/verl at b178a3c, January 2026):

- ``sft.parquet``, for the multi-turn SFT dataset (``verl/utils/dataset/multiturn_sft_dataset.py``,
  ``data.multiturn.enable=true data.multiturn.messages_key=messages``): ``messages``, a list of ``{role, content}``
  structs, one row per cleaned (and resampled) sample, in the order given; ``question``, ``answer`` (aliases joined
  by ``<|answer_split|>``) and ``source`` ride along for reports and are not read by verl. There is no ``tools``
  column: the protocol writes the tool schemas into the system text (PROTOCOL.md, "Conversation layout"), and a
  ``tools`` value would make the chat template write a second tools block.
- ``rl.parquet``, for the RL dataset and the agent loop (``docs/preparation/prepare_data.rst``,
  ``docs/start/agentic_rl.rst``): ``data_source``, ``prompt`` (the system message and the question, as the rollouts
  start), ``ability``, ``reward_model`` ``{ground_truth, style}`` (aliases joined by ``<|answer_split|>``, which
  DR-Venus's reward code splits), ``extra_info`` ``{index, id, question, answers, split}`` and ``agent_name``
  (default ``dr_agent``, the loop DR-Venus registers in ``RL/configs/dr_agent_loop.yaml``).
- ``chat_template.jinja``: plain ChatML whose generation prompt is ``<|im_start|>assistant\\n<think>\\n``; see 2.

The messages are written as ``venus_edge.protocol.render_parts`` renders them (the text between ``<|im_start|>role\\n``
and ``<|im_end|>``), which is the text we train on (``venus_edge.train.tokenize``). Where verl's tokenization gives
the same ids and loss mask as ours, and where it cannot:

1. verl from fb03941 to c0bf197 (April to November 2025, and the fork in DR-Venus's ``SFT/verl``) renders growing
   prefixes of the conversation with the model's own template: with the Qwen3 Thinking-2507 template the ids and the
   loss mask equal ours token for token (``tests/train/test_verl_export.py`` computes them as verl does).
2. verl since f332fc8 (December 2025) renders each message alone and checks the concatenation against the whole
   conversation. The Thinking-2507 template drops the reasoning of an assistant message that follows no question in
   the same call, so every turn alone loses its ``<think>`` block and the check stops the run (with
   ``ignore_input_ids_mismatch`` it trains without reasoning). Pass ``model.custom_chat_template`` the text of the
   exported ``chat_template.jinja``: it writes each message as given, and the ids and the mask equal ours again.
3. A message quoting control-token text (``<|im_end|>`` in a web page) is tokenized by verl as the control token,
   by us as text (the model is shown text at inference). ``VerlExport.control_token_samples`` counts such samples.
4. An assistant turn whose reasoning is empty starts with ``<think>\\n\\n</think>``: we train the ``\\n\\n`` token that
   straddles the generation prompt; verl encodes the prompt apart, so its ids differ there. Cleaning keeps no such
   turn (``rebuild_turns`` drops a call without reasoning); a final answer without reasoning can still have one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date as Date
from pathlib import Path
from typing import Any

from venus_edge.eval.data import ANSWER_SPLIT, EvalExample
from venus_edge.protocol import CONTROL_TOKEN_OPEN, IM_END, IM_START, render_parts, render_system_prompt
from venus_edge.tools.observation_styles import DEFAULT_OBSERVATION_STYLE, ObservationStyle
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA
from venus_edge.train.data import Sample

__all__ = [
    "VERBATIM_CHAT_TEMPLATE",
    "VerlExport",
    "export_verl",
    "verl_rl_rows",
    "verl_sft_rows",
]

SFT_FILE = "sft.parquet"
RL_FILE = "rl.parquet"
TEMPLATE_FILE = "chat_template.jinja"
#: The agent loop DR-Venus registers for its rollouts (``RL/configs/dr_agent_loop.yaml``); verl's own are
#: ``tool_agent`` and ``single_turn_agent``.
DEFAULT_AGENT_NAME = "dr_agent"
DEFAULT_ABILITY = "deep_research"

#: ChatML that writes every message as given; its generation prompt opens the reasoning as Thinking-2507's does, so
#: verl's mask (the generation prompt untrained, the rest of an assistant message trained) is ours.
VERBATIM_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class VerlExport:
    """What ``export_verl`` wrote.

    Attributes:
        sft_path: ``sft.parquet`` (None when no SFT sample was given).
        rl_path: ``rl.parquet`` (None when no question was given).
        template_path: ``chat_template.jinja``.
        sft_rows: rows in ``sft.parquet``.
        rl_rows: rows in ``rl.parquet``.
        control_token_samples: SFT samples with control-token text in a message, which verl tokenizes otherwise
            (module docstring, 3).
    """

    sft_path: Path | None
    rl_path: Path | None
    template_path: Path
    sft_rows: int
    rl_rows: int
    control_token_samples: int


def _messages(sample: Sample) -> list[dict[str, str]]:
    """The sample's messages as ``render_parts`` writes them: the text between the ChatML head and ``<|im_end|>``."""
    out = []
    for message, part in zip(sample.messages, render_parts(sample.messages, add_generation_prompt=False)):
        head = f"{IM_START}{message['role']}\n"
        out.append({"role": message["role"], "content": part[len(head) : len(part) - len(IM_END) - 1]})
    return out


def verl_sft_rows(samples: Iterable[Sample]) -> list[dict[str, Any]]:
    """One row of ``sft.parquet`` per sample (module docstring), in order; repeats from resampling stay repeats."""
    return [{"messages": _messages(sample), "question": sample.question, "answer": ANSWER_SPLIT.join(sample.answers),
             "source": sample.source} for sample in samples]


def verl_rl_rows(
    examples: Iterable[EvalExample],
    *,
    today: Date | str,
    data_source: str,
    split: str = "train",
    agent_name: str = DEFAULT_AGENT_NAME,
    ability: str = DEFAULT_ABILITY,
    observation_style: ObservationStyle = DEFAULT_OBSERVATION_STYLE,
) -> list[dict[str, Any]]:
    """One row of ``rl.parquet`` per question (module docstring).

    Args:
        examples: the questions with their accepted answers (``venus_edge.eval.data.load_examples``).
        today: the system prompt's date line.
        data_source: the ``data_source`` value (verl picks the reward function by it).
        split: written into ``extra_info.split``.
        agent_name: the agent loop verl runs for the row.
        ability: the ``ability`` value.
        observation_style: the system prompt's style (``tools.observation_styles``): ``rl`` is DR-Venus's RL rollouts'.

    Raises:
        ValueError: a question without an accepted answer (the reward needs a ground truth); names its id.
    """
    system = render_system_prompt((SEARCH_SCHEMA, VISIT_SCHEMA), today, style=observation_style)
    rows = []
    for index, example in enumerate(examples):
        if not example.answers:
            raise ValueError(f"question {example.id!r} has no answer: the RL reward needs a ground truth")
        rows.append({
            "data_source": data_source,
            "prompt": [{"role": "system", "content": system}, {"role": "user", "content": example.question}],
            "ability": ability,
            "reward_model": {"ground_truth": ANSWER_SPLIT.join(example.answers), "style": "rule"},
            "extra_info": {"index": index, "id": example.id, "question": example.question,
                           "answers": list(example.answers), "split": split},
            "agent_name": agent_name,
        })
    return rows


def _schemas() -> tuple[Any, Any]:
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    sft = pa.schema([("messages", pa.list_(message)), ("question", pa.string()), ("answer", pa.string()),
                     ("source", pa.string())])
    extra = pa.struct([("index", pa.int64()), ("id", pa.string()), ("question", pa.string()),
                       ("answers", pa.list_(pa.string())), ("split", pa.string())])
    rl = pa.schema([("data_source", pa.string()), ("prompt", pa.list_(message)), ("ability", pa.string()),
                    ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
                    ("extra_info", extra), ("agent_name", pa.string())])
    return sft, rl


def export_verl(
    out: str | os.PathLike[str],
    *,
    samples: Sequence[Sample] = (),
    examples: Sequence[EvalExample] = (),
    today: Date | str,
    data_source: str = "venus-edge",
    agent_name: str = DEFAULT_AGENT_NAME,
    observation_style: ObservationStyle = DEFAULT_OBSERVATION_STYLE,
) -> VerlExport:
    """Write ``OUT/sft.parquet`` (from ``samples``), ``OUT/rl.parquet`` (from ``examples``) and
    ``OUT/chat_template.jinja``; each parquet file is written whole to a temporary name, then renamed.

    Raises:
        ImportError: pyarrow is missing (``pip install 'venus-edge[train]'``).
        ValueError: a question without an answer (``verl_rl_rows``).
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(f"writing parquet needs pyarrow: pip install 'venus-edge[train]' ({exc})") from exc
    folder = Path(out)
    sft_schema, rl_schema = _schemas()
    rl_rows = verl_rl_rows(examples, today=today, data_source=data_source, agent_name=agent_name,
                           observation_style=observation_style)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path | None] = {}
    for name, rows, schema in ((SFT_FILE, verl_sft_rows(samples), sft_schema), (RL_FILE, rl_rows, rl_schema)):
        if not rows:
            written[name] = None
            continue
        path = folder / name
        partial = path.with_name(path.name + ".partial")
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), partial)
        partial.replace(path)
        written[name] = path
    template = folder / TEMPLATE_FILE
    template.write_text(VERBATIM_CHAT_TEMPLATE, encoding="utf-8")  # no newline: it would end every render
    control = sum(any(CONTROL_TOKEN_OPEN in m["content"] for m in s.messages) for s in samples)
    return VerlExport(written[SFT_FILE], written[RL_FILE], template, len(samples), len(rl_rows), control)
