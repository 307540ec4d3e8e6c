"""Evaluation data in the formats people have on disk: generic JSONL/CSV/parquet rows with answer aliases,
BrowseComp's encrypted CSV, GAIA's metadata.jsonl; bad rows skipped with a reason."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
from pathlib import Path

import pytest

from venus_edge.eval.data import ANSWER_SPLIT, decrypt, encrypt, load_examples


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(row if isinstance(row, str) else json.dumps(row) for row in rows) + "\n")
    return path


def test_jsonl_rows_with_answer_aliases_and_bad_rows(tmp_path):
    path = write_jsonl(tmp_path / "rl.jsonl", [
        {"question": "When was tomllib added?", "answer": f"3.11{ANSWER_SPLIT}Python 3.11{ANSWER_SPLIT} 3.11 "},
        '{"question": "broken',
        {"question": "no answer here"},
        {"prompt": "Which protocol?", "gt": ["4", "four"], "id": 17, "topic": "pickle"},
        [1, 2],
    ])
    report = load_examples(path)
    first, second = report.examples
    assert (first.id, first.question, first.answers) == ("rl-0001", "When was tomllib added?", ("3.11", "Python 3.11"))
    assert (second.id, second.answers, dict(second.metadata)) == ("17", ("4", "four"), {"topic": "pickle"})
    assert [(n, why.split(" (")[0]) for n, why in report.skipped] == [(2, "not JSON"), (3, "no answer"),
                                                                      (5, "not a JSON object")]


def test_csv_and_parquet_rows(tmp_path):
    with (tmp_path / "qa.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["id", "question", "answer"])
        writer.writeheader()
        writer.writerow({"id": "a", "question": "Q1?", "answer": "x"})
        writer.writerow({"id": "b", "question": "", "answer": "y"})
    report = load_examples(tmp_path / "qa.csv")
    assert [e.id for e in report.examples] == ["a"] and report.skipped[0][0] == 3

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"question": ["Q1?", "Q2?"], "answer": [f"1{ANSWER_SPLIT}one", "2"]})
    pq.write_table(table, tmp_path / "qa.parquet")
    report = load_examples(tmp_path / "qa.parquet", limit=1)
    assert [(e.question, e.answers) for e in report.examples] == [("Q1?", ("1", "one"))]


def test_browsecomp_fields_decrypt_with_the_rows_canary(tmp_path):
    """The published scheme: base64 of the text XOR SHA-256(canary) repeated; checked against a by-hand XOR."""
    canary = "BrowseComp canary GUID 1234"
    key = hashlib.sha256(canary.encode()).digest()
    plain = "Which 1990s film about a chess prodigy won an award at a festival held in a lakeside town?"
    by_hand = base64.b64encode(bytes(b ^ key[i % 32] for i, b in enumerate(plain.encode()))).decode()
    assert encrypt(plain, canary) == by_hand and decrypt(by_hand, canary) == plain
    path = tmp_path / "browse_comp_test_set.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["problem", "answer", "problem_topic", "canary"])
        writer.writeheader()
        writer.writerow({"problem": by_hand, "answer": encrypt("Searching for Bobby", canary),
                         "problem_topic": "Art", "canary": canary})
        writer.writerow({"problem": "not base64!", "answer": "x", "problem_topic": "Art", "canary": canary})
    report = load_examples(path)
    assert report.format == "browsecomp"
    [example] = report.examples
    assert example.question == plain and example.answers == ("Searching for Bobby",)
    assert example.metadata["problem_topic"] == "Art" and "decrypt" in report.skipped[0][1]


def test_gaia_metadata_keeps_the_text_only_tasks(tmp_path):
    path = write_jsonl(tmp_path / "metadata.jsonl", [
        {"task_id": "t1", "Question": "How many studio albums?", "Level": 1, "Final answer": "3", "file_name": ""},
        {"task_id": "t2", "Question": "What is in the sheet?", "Level": 2, "Final answer": "7",
         "file_name": "data.xlsx"},
    ])
    report = load_examples(path)
    assert report.format == "gaia" and [(e.id, e.answers) for e in report.examples] == [("t1", ("3",))]
    assert "attached file 'data.xlsx'" in report.skipped[0][1]


def test_the_shipped_pydocs_set_loads_by_name():
    report = load_examples("pydocs")
    assert len(report.examples) >= 50 and not report.skipped
    assert len({e.id for e in report.examples}) == len(report.examples)
    assert all(e.metadata["source_urls"][0].startswith("corpus://pydocs/") for e in report.examples)


def test_missing_file_and_unknown_type_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="built-in sets: pydocs"):
        load_examples(tmp_path / "nope.jsonl")
    (tmp_path / "data.txt").write_text("x")
    with pytest.raises(ValueError, match="unsupported data file type"):
        load_examples(tmp_path / "data.txt")
    write_jsonl(tmp_path / "empty.jsonl", ['{"oops": 1}'])
    with pytest.raises(ValueError, match=r"no usable question/answer row .*row 1: no question"):
        load_examples(tmp_path / "empty.jsonl")


PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")


def _page_text(url: str) -> str:
    import lxml.html

    tree = lxml.html.parse(str(PYTHON_DOCS / url.removeprefix("corpus://pydocs/"))).getroot()
    for node in tree.xpath("//script|//style"):
        node.drop_tree()
    return " ".join(tree.text_content().replace("\u00b6", " ").split())


def test_every_shipped_answer_is_in_the_python_docs():
    """Each item's evidence is on its cited pages and an accepted answer is on the page that answers it (the last
    URL): the set is answerable by search and visit over the docs corpus."""
    if not (PYTHON_DOCS / "library" / "tomllib.html").is_file():
        pytest.skip("Debian's python3.11-doc is not installed")
    for example in load_examples("pydocs").examples:
        urls = example.metadata["source_urls"]
        texts = [_page_text(url) for url in urls]
        assert example.metadata["hops"] == len(urls), example.id
        assert any(answer.lower() in texts[-1].lower() for answer in example.answers), (example.id, example.answers)
        for piece in example.metadata["evidence"].split(" || "):
            assert any(" ".join(piece.split()) in text for text in texts), (example.id, piece[:60])
