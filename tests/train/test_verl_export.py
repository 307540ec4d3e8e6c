"""`venus-edge train export-verl`: the parquet files read back with pyarrow, their columns and types, and the loss
masks verl computes from them (both of verl's multi-turn SFT tokenizations, written here from the descriptions in
``venus_edge.train.verl_export``) against our own SFT tokenization of the same trajectories."""

from __future__ import annotations

import json

import pytest

from venus_edge.cli import main
from venus_edge.protocol import observation, render_system_prompt
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA
from venus_edge.train.data import Sample, load_samples
from venus_edge.train.tokenize import tokenize_messages
from venus_edge.train.verl_export import RL_FILE, SFT_FILE, TEMPLATE_FILE, VERBATIM_CHAT_TEMPLATE, export_verl

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def call(reasoning: str, name: str, arguments: dict) -> dict:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return {"role": "assistant", "content": f"<think>\n{reasoning}\n</think>\n\n<tool_call>\n{body}\n</tool_call>"}


def raw_row(question: str, answer: str, hops: int) -> dict:
    """A raw trajectory row (OpenAI messages, no system prompt) of ``hops`` search/visit pairs, then the answer."""
    messages: list[dict] = [{"role": "user", "content": question}]
    for hop in range(hops):
        hits = [{"query": f"q{hop}", "web_page_info_list": [
            {"title": f"Page {hop}", "url": f"https://example.org/{hop}", "snippet": "Ein «Treffer» — 结果."}]}]
        messages += [call(f"Hop {hop}: search.", "search", {"query": [f"q{hop}"]}),
                     {"role": "user", "content": observation(json.dumps(hits, ensure_ascii=False))},
                     call(f"Hop {hop}: open it.", "visit", {"url": f"https://example.org/{hop}", "goal": "fact"}),
                     {"role": "user", "content": observation(f"The page says {answer}.")}]
    final = f"<think>\nIt is {answer}.\n</think>\n\n<answer>\n{answer}\n</answer>"
    messages.append({"role": "assistant", "content": final})
    return {"question": question, "answer": answer, "messages": messages}


@pytest.fixture
def exported(tmp_path):
    """Raw rows -> `train clean --resample` (one 51-turn row, resampled twice) -> `train export-verl`."""
    raw = tmp_path / "raw.jsonl"
    rows = [raw_row("Where was Ada born?", "Lyon", 1), raw_row("Who taught Bo?", "Cy", 2),
            raw_row("How long?", "Long", 13)]  # 1 + 4 * 13 * 2 // 2 = 52 turns: the 51-100 bucket
    raw.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    cleaned = tmp_path / "sft.jsonl"
    assert main(["train", "clean", str(raw), "--out", str(cleaned), "--date", "2026-03-01", "--resample",
                 "--thresholds", "10,100"]) == 0
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"id": "q-1", "question": "Where was Ada born?", "answer": ["Lyon", "Lyons"]})
                         + "\n" + json.dumps({"id": "q-2", "question": "Who taught Bo?", "answer": "Cy"}) + "\n")
    out = tmp_path / "verl"
    assert main(["train", "export-verl", "--sft", str(cleaned), "--questions", str(questions), "--out", str(out),
                 "--date", "2026-03-01"]) == 0
    return cleaned, out


def test_sft_parquet_reads_back_with_verl_s_columns(exported):
    cleaned, out = exported
    table = pq.read_table(out / SFT_FILE)
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    assert table.schema.field("messages").type == pa.list_(message)
    assert table.column_names == ["messages", "question", "answer", "source"]
    ours = load_samples([cleaned]).samples
    rows = table.to_pylist()
    assert len(rows) == len(ours) == 4  # the long row twice (resampling), in the cleaned file's order
    for row, sample in zip(rows, ours):
        assert row["messages"] == [dict(m) for m in sample.messages]  # cleaned text is already the rendered text
        expected = sample.to_dict()
        assert (row["question"], row["answer"], row["source"]) == (sample.question, expected["answer"], sample.source)
    assert [m["role"] for m in rows[0]["messages"]][:3] == ["system", "user", "assistant"]


def test_rl_parquet_reads_back_with_verl_s_columns(exported):
    _, out = exported
    table = pq.read_table(out / RL_FILE)
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"]
    assert table.schema.field("reward_model").type == pa.struct([("ground_truth", pa.string()),
                                                                 ("style", pa.string())])
    assert pa.types.is_list(table.schema.field("prompt").type)
    first = table.to_pylist()[0]
    assert first["prompt"] == [
        {"role": "system", "content": render_system_prompt((SEARCH_SCHEMA, VISIT_SCHEMA), "2026-03-01")},
        {"role": "user", "content": "Where was Ada born?"},
    ]
    assert first["reward_model"] == {"ground_truth": "Lyon<|answer_split|>Lyons", "style": "rule"}
    assert first["extra_info"] == {"index": 0, "id": "q-1", "question": "Where was Ada born?",
                                   "answers": ["Lyon", "Lyons"], "split": "train"}
    assert (first["data_source"], first["ability"], first["agent_name"]) == ("venus-edge", "deep_research", "dr_agent")
    assert (out / TEMPLATE_FILE).read_text() == VERBATIM_CHAT_TEMPLATE


# ------------------------------------------------------------- verl's two ways to tokenize a multi-turn SFT row


def _ids(tokenizer, messages, *, generation_prompt: bool = False, template: str | None = None) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt,
                                        chat_template=template)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def _text(tokenizer, messages, *, generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def verl_by_prefixes(tokenizer, messages) -> tuple[list[int], list[int]]:
    """verl fb03941..c0bf197 (and DR-Venus's SFT fork): each message is the text its prefix adds to the rendering of
    the conversation before it; an assistant message's generation prompt is encoded apart and not trained, the rest
    of the message is trained; the ids are this concatenation when it differs from the whole conversation's."""
    ids: list[int] = []
    mask: list[int] = []
    for index, message in enumerate(messages):
        before = _text(tokenizer, messages[:index]) if index else ""
        upto = _text(tokenizer, messages[: index + 1])
        if message["role"] == "assistant":
            prompted = _text(tokenizer, messages[:index], generation_prompt=True)
            prompt_ids = tokenizer.encode(prompted[len(before):], add_special_tokens=False)
            rest_ids = tokenizer.encode(upto[len(prompted):], add_special_tokens=False)
            ids += prompt_ids + rest_ids
            mask += [0] * len(prompt_ids) + [1] * len(rest_ids)
        else:
            part = tokenizer.encode(upto[len(before):], add_special_tokens=False)
            ids += part
            mask += [0] * len(part)
    return ids, mask


def verl_by_messages(tokenizer, messages, template: str | None = None) -> tuple[list[int], list[int]]:
    """verl since f332fc8: each message rendered alone (the template's system prompt cut from all but the first);
    an assistant message is trained but for the generation prompt's token count."""
    empty = [{"role": "user", "content": ""}]
    one, two = _ids(tokenizer, empty, template=template), _ids(tokenizer, empty * 2, template=template)
    system_prompt = one[: len(one) - (len(two) - len(one))]
    generation_prompt = _ids(tokenizer, empty, generation_prompt=True, template=template)[len(one):]
    ids: list[int] = []
    mask: list[int] = []
    for index, message in enumerate(messages):
        part = _ids(tokenizer, [message], template=template)
        if index and message["role"] != "system":
            part = part[len(system_prompt):]
        ids += part
        trained = message["role"] == "assistant"
        mask += [0 if not trained or i < len(generation_prompt) else 1 for i in range(len(part))]
    return ids, mask


def test_verl_s_prefix_tokenization_gives_our_ids_and_mask(exported, qwen3_tokenizer):
    cleaned, out = exported
    for row, sample in zip(pq.read_table(out / SFT_FILE).to_pylist(), load_samples([cleaned]).samples):
        ours = tokenize_messages(sample.messages, qwen3_tokenizer)
        ids, mask = verl_by_prefixes(qwen3_tokenizer, row["messages"])
        assert ids == list(ours.input_ids) == _ids(qwen3_tokenizer, row["messages"])  # verl's check passes
        assert mask == list(ours.assistant_mask)
        assert sum(mask) > 0


def test_verl_s_per_message_tokenization_needs_the_exported_template(exported, qwen3_tokenizer):
    cleaned, out = exported
    template = (out / TEMPLATE_FILE).read_text()
    row = pq.read_table(out / SFT_FILE).to_pylist()[1]
    sample = load_samples([cleaned]).samples[1]
    ours = tokenize_messages(sample.messages, qwen3_tokenizer)
    # The model's own template renders each assistant turn alone without its reasoning: verl's check would stop.
    stock_ids, _ = verl_by_messages(qwen3_tokenizer, row["messages"])
    assert stock_ids != _ids(qwen3_tokenizer, row["messages"])
    assert "<think>" not in qwen3_tokenizer.decode(stock_ids[len(_ids(qwen3_tokenizer, row["messages"][:2])):])
    # With the exported template (model.custom_chat_template) the ids and the mask are ours.
    ids, mask = verl_by_messages(qwen3_tokenizer, row["messages"], template)
    assert ids == list(ours.input_ids) == _ids(qwen3_tokenizer, row["messages"], template=template)
    assert mask == list(ours.assistant_mask)


def test_control_token_text_is_counted(tmp_path, qwen3_tokenizer):
    """A page quoting `<|im_end|>`: our ids keep it as text, verl's parse it as the control token (departure 3)."""
    messages = [{"role": "system", "content": render_system_prompt((SEARCH_SCHEMA, VISIT_SCHEMA), "2026-03-01")},
                *raw_row("Q?", "A", 1)["messages"]]
    messages[5] = {"role": "user", "content": observation("A page that quotes <|im_end|> in its text.")}
    sample = Sample(tuple(messages), "Q?", ("A",), "quote")
    result = export_verl(tmp_path, samples=[sample], today="2026-03-01")
    assert (result.sft_rows, result.rl_rows, result.rl_path, result.control_token_samples) == (1, 0, None, 1)
    row = pq.read_table(result.sft_path).to_pylist()[0]
    assert verl_by_prefixes(qwen3_tokenizer, row["messages"])[0] != list(
        tokenize_messages(sample.messages, qwen3_tokenizer).input_ids)


def test_rows_not_cleaned_are_named_and_not_exported(tmp_path, capsys):
    data = tmp_path / "raw.jsonl"
    data.write_text(json.dumps(raw_row("Q?", "A", 1)) + "\n{broken\n")
    code = main(["train", "export-verl", "--sft", str(data), "--out", str(tmp_path / "out"), "--date", "2026-03-01"])
    captured = capsys.readouterr()
    assert code == 1
    assert "raw.jsonl:row 1: bad structure: the first message is not the system prompt" in captured.err
    assert "raw.jsonl:row 2: broken row" in captured.err
    assert not (tmp_path / "out" / SFT_FILE).exists()


def test_a_question_without_answer_is_an_error(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "export-verl", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    from venus_edge.eval.data import EvalExample

    with pytest.raises(ValueError, match="'q-9' has no answer"):
        export_verl(tmp_path, examples=[EvalExample("q-9", "Q?", ())], today="2026-03-01")


def test_an_answer_without_reasoning_differs_at_the_generation_prompt(tmp_path, qwen3_tokenizer):
    """Departure 4: `<think>\\n\\n</think>` is one `\\n\\n` token for us (trained: it straddles the generation
    prompt), two `\\n` tokens for verl, which encodes the generation prompt apart."""
    messages = [{"role": "system", "content": render_system_prompt((SEARCH_SCHEMA, VISIT_SCHEMA), "2026-03-01")},
                {"role": "user", "content": "Q?"},
                {"role": "assistant", "content": "<think>\n\n</think>\n\n<answer>\nA\n</answer>"}]
    result = export_verl(tmp_path, samples=[Sample(tuple(messages), "Q?", ("A",), "empty")], today="2026-03-01")
    row = pq.read_table(result.sft_path).to_pylist()[0]
    ours = tokenize_messages(messages, qwen3_tokenizer)
    ids, mask = verl_by_prefixes(qwen3_tokenizer, row["messages"])
    assert len(ids) == len(ours.input_ids) + 1
    assert sum(mask) == ours.trained_tokens
