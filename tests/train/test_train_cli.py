"""`venus-edge train clean` end to end on a file of good and bad rows: the rows written, the report printed and
saved, resampling, and the errors a user can make."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from venus_edge.cli import main
from venus_edge.protocol import observation
from venus_edge.train.data import load_samples

TOOL_TURN = ('<think>\nLook it up.\n</think>\n<tool_call>\n{"name": "search", "arguments": {"queries": "q"}}\n'
             '</tool_call>')
ANSWER = "<think>\nFound it.\n</think>\n<answer>\n42\n</answer>"


def row(question: str, turns: int = 1, final: str = ANSWER, gt: str = "42") -> dict:
    messages = [{"role": "user", "content": question}]
    for index in range(turns - 1):
        call = TOOL_TURN.replace('"q"', f'"q{index}"')
        messages += [{"role": "assistant", "content": call}, {"role": "user", "content": observation(f"r{index}")}]
    return {"question": question, "gt": gt, "messages": [*messages, {"role": "assistant", "content": final}]}


def test_clean_writes_rows_and_a_report(tmp_path, capsys):
    data = tmp_path / "raw.jsonl"
    rows = [row("Short?", 3), row("Long?", 60), row("Wrong?", 2, gt="41"), row("No answer?", 2, final=TOOL_TURN)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n")
    out = tmp_path / "sft.jsonl"
    code = main(["train", "clean", str(data), "--out", str(out), "--date", "2026-03-01", "--keep-correct",
                 "--resample"])
    printed = capsys.readouterr().out
    assert code == 0
    written = load_samples([out])
    assert sorted(s.question for s in written.samples) == ["Long?", "Long?", "Short?"]  # 60 turns: twice
    short = next(s for s in written.samples if s.question == "Short?")
    assert short.messages[0]["content"].endswith("Current date: 2026-03-01\n")
    assert '"arguments": {"query": ["q0"]}' in short.messages[2]["content"]
    assert "1 rows not read" in printed and "| broken row | 1 |" in printed
    assert "| keep_correct | 0 | 1 |" in printed and "| rebuild_turns | 3 | 1 |" in printed
    assert "| 51-100 turns | 1 | 2 |" in printed and f"3 rows written to {out}" in printed
    assert (tmp_path / "sft.report.md").read_text() == printed
    summary = json.loads((tmp_path / "sft.report.json").read_text())
    assert summary["written"] == 3 and summary["clean"]["dropped"] == {"rebuild_turns": 1, "keep_correct": 1}


def test_a_full_disk_leaves_no_torn_output_and_the_rerun_writes_it(tmp_path):
    """A disk that filled while the rows were written left a file cut in its last row, with a traceback and no
    report; the rerun refused the file ("exists"), and training read it with its torn row. The file size limit
    (``RLIMIT_FSIZE``, what ``ulimit -f`` sets) stands for the full disk."""
    import resource

    data = tmp_path / "raw.jsonl"
    data.write_text("".join(json.dumps(row(f"Question {i}?", 5)) + "\n" for i in range(200)))
    out = tmp_path / "clean" / "sft.jsonl"
    command = [sys.executable, "-m", "venus_edge.cli", "train", "clean", str(data), "--out", str(out)]

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (data.stat().st_size // 2, resource.RLIM_INFINITY))

    full = subprocess.run(command, capture_output=True, text=True, preexec_fn=small_disk)
    assert full.returncode == 3 and "Traceback" not in full.stderr, full.stderr[-2000:]
    assert "cannot write" in full.stderr and "nothing was kept" in full.stderr
    assert sorted(path.name for path in out.parent.iterdir()) == []  # no torn file, no partial one, no report
    again = subprocess.run(command, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(load_samples([out]).samples) == 200 and not load_samples([out]).rejected


def test_usage_errors(tmp_path):
    data = tmp_path / "raw.jsonl"
    data.write_text(json.dumps(row("Q?")) + "\n")
    out = tmp_path / "out.jsonl"
    out.write_text("earlier\n")
    command = [sys.executable, "-m", "venus_edge.cli", "train", "clean", str(data), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 2 and "exists" in done.stderr and out.read_text() == "earlier\n"
    out.unlink()
    done = subprocess.run([*command, "--multipliers", "1,2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # without --resample the multipliers are not used
    out.unlink()
    done = subprocess.run([*command, "--resample", "--multipliers", "1,2"], capture_output=True, text=True)
    assert done.returncode == 2 and "need 3 multipliers" in done.stderr
    done = subprocess.run([*command[:-3], str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "x.jsonl")],
                          capture_output=True, text=True)
    assert done.returncode == 3 and "no training data" in done.stderr


@pytest.mark.parametrize(("arguments", "message"), [
    (["--hidden", "40"], "multiple of 16"),
    (["--hidden", "4"], "at least 16"),  # these wrote a checkpoint that nothing could run, and exited 0
    (["--hidden", "0"], "at least 16"),
    (["--layers", "0"], "at least 1"),
    (["--layers", "-1"], "at least 1"),
    (["--vocab", "100"], "at least 512"),
    (["--pretrain-copying", "-5"], "at least 0"),  # an IndexError traceback
])
def test_tiny_model_usage_errors(tmp_path, capsys, arguments, message):
    (tmp_path / "t.md").write_text("some text " * 50)
    with pytest.raises(SystemExit) as exited:
        main(["train", "tiny-model", str(tmp_path / "t.md"), "--out", str(tmp_path / "m"), *arguments])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert main(["train", "tiny-model", str(tmp_path / "missing.md"), "--out", str(tmp_path / "m")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_a_tiny_model_whose_pretraining_fails_leaves_nothing(tmp_path, capsys):
    """The random model was written before the pretraining failed: a folder that looked like a pretrained model,
    and a rerun with more text was refused ("not an empty folder")."""
    (tmp_path / "t.md").write_text("alpha beta gamma delta\n")
    out = tmp_path / "base"
    assert main(["train", "tiny-model", str(tmp_path / "t.md"), "--out", str(out), "--vocab", "512", "--hidden",
                 "16", "--layers", "1", "--pretrain-copying", "5"]) == 2
    assert "fewer than one window" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("command", [["train", "toy-world", "{under}"],
                                     ["train", "tiny-model", "{text}", "--out", "{under}"],
                                     ["train", "clean", "{text}", "--out", "{under}/o.jsonl"]])
def test_an_out_under_a_file_is_one_line(tmp_path, capsys, command):
    (tmp_path / "t.md").write_text("some text " * 50)
    (tmp_path / "a-file").write_text("x")
    values = {"under": str(tmp_path / "a-file" / "sub"), "text": str(tmp_path / "t.md")}
    code = main([arg.format(**values) for arg in command])
    err = capsys.readouterr().err
    assert code in (1, 2, 3) and "Traceback" not in err and "error:" in err, err


def test_tiny_model_never_writes_over_another_model(tmp_path, capsys):
    (tmp_path / "t.md").write_text("some text " * 50)
    model = tmp_path / "run" / "final"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"trained weights")
    assert main(["train", "tiny-model", str(tmp_path / "t.md"), "--out", str(model)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert (model / "model.safetensors").read_bytes() == b"trained weights"


@pytest.mark.parametrize("people", ["0", "-3", "7"])
def test_a_toy_world_too_small_is_a_usage_error(tmp_path, capsys, people):
    with pytest.raises(SystemExit) as exited:
        main(["train", "toy-world", str(tmp_path / "w"), "--people", people])
    assert exited.value.code == 2 and "at least 8" in capsys.readouterr().err


def test_a_copy_window_repeats_a_random_span_at_varying_distances():
    """The repeats lie a random distance back and are random tokens, so only finding the span by its content
    predicts them (not an offset, not the text around them)."""
    import random

    from venus_edge.train.tinymodel import copy_window

    stream = list(range(10_000))  # the window of a stream of distinct tokens is a run of consecutive numbers
    rng, distances, random_sources = random.Random(0), set(), 0
    for _ in range(200):
        ids, repeated = copy_window(stream, rng, length=64, span=12)
        assert len(ids) == len(repeated) == 64
        marked = [k for k, flag in enumerate(repeated) if flag]
        target, size = marked[0] - 1, len(marked) + 1  # the repeat's first token is not marked: nothing foretells it
        assert 4 <= size <= 12 and marked == list(range(target + 1, target + size))
        repeat = ids[target:target + size]
        sources = [k for k in range(target - size + 1) if ids[k:k + size] == repeat]
        assert sources, "the repeat copies a span earlier in the window"
        offsets = [value - k for k, value in enumerate(ids)]
        start = max(set(offsets), key=offsets.count)  # the window's first token: most positions still hold start + k
        written = {k for k in range(64) if offsets[k] != start}
        assert written <= set(range(sources[-1], sources[-1] + size)) | set(range(target, target + size))
        distances.add(target - sources[-1])
        random_sources += len(written & set(range(sources[-1], sources[-1] + size))) >= size - 1
    assert len(distances) > 20
    assert random_sources > 190  # the span itself was drawn, not a piece of the text (which its context predicts)
    with pytest.raises(ValueError, match="cannot hold a span"):
        copy_window(stream, rng, length=20, span=12)
    with pytest.raises(ValueError, match="fewer than one window"):
        copy_window(stream[:64], rng, length=64, span=12)


def test_copy_pretraining_trains_the_model_in_place_and_reports_the_repeat_loss(tmp_path, capsys):
    pytest.importorskip("torch")
    from venus_edge.train.tinymodel import COPY_PHASES, pretrain_copying, write_tiny_model

    words = ["Kemtus", "Turrok", "Bromdeok", "Feotaik", "weaver", "1862", "glassblower", "Nailfus", "Baikdak", "of"]
    rng = __import__("random").Random(0)
    (tmp_path / "t.md").write_text(" ".join(rng.choice(words) for _ in range(3000)))
    folder = write_tiny_model([tmp_path / "t.md"], tmp_path / "m", vocab=512, hidden=64, layers=2)
    before = (folder / "model.safetensors").read_bytes()
    losses = pretrain_copying(folder, [tmp_path / "t.md"], steps=80, batch=16, span=24, length=96)
    assert len(losses) == 80 and (folder / "model.safetensors").read_bytes() != before
    # The machinery: the loss of the repeats falls from a random model's (~log of the 576-token vocabulary, 6.4)
    # towards guessing among the ~25 tokens of a window (3.2). Copying them by content takes ~700 steps of a
    # hidden-128 model (the toy run), past CI's size; the rows that teach it are checked above.
    phase_one = round(80 * COPY_PHASES[0][0])  # then longer windows, where the loss rises again at first
    first, last = sum(losses[:5]) / 5, sum(losses[phase_one - 5:phase_one]) / 5
    assert first > 5 and last < first - 2
    with pytest.raises(ValueError, match="fewer than one window"):
        pretrain_copying(folder, [tmp_path / "t.md"], steps=1, span=24, length=100_000)
    with pytest.raises(ValueError, match="cannot hold a span"):
        pretrain_copying(folder, [tmp_path / "t.md"], steps=1, span=60, length=96)
    assert main(["train", "tiny-model", str(tmp_path / "t.md"), "--out", str(tmp_path / "n"), "--vocab", "512",
                 "--hidden", "64", "--layers", "2", "--pretrain-copying", "2"]) == 0
    assert "pretrained to copy: 2 steps" in capsys.readouterr().out


@pytest.mark.parametrize("share", ["1.5", "-0.1", "nan"])
def test_toy_world_refuses_a_detour_share_outside_zero_to_one(tmp_path, capsys, share):
    assert main(["train", "toy-world", str(tmp_path / "w"), "--people", "8", "--detour-share", share]) == 2
    assert "--detour-share must be between 0 and 1" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # nothing half-written


def test_toy_world_with_detours_writes_longer_oracle_sessions(tmp_path, capsys):
    assert main(["train", "toy-world", str(tmp_path / "w"), "--people", "8", "--detour-share", "1"]) == 0
    assert "the oracle answered" in capsys.readouterr().out
    records = [json.loads(line) for line in (tmp_path / "w" / "trajectories.jsonl").read_text().splitlines()]
    questions = (tmp_path / "w" / "questions-train.jsonl").read_text().splitlines()
    visits = sum(1 for r in records if (r.get("tool_call") or {}).get("name") == "visit")
    two_hop = sum(1 for line in questions if json.loads(line)["kind"].endswith("2"))
    assert visits == 2 * len(questions) + two_hop  # every session opens one wrong page more than it needs


def test_a_model_path_that_does_not_exist_is_named(tmp_path, capsys):
    """transformers took a missing local path for a hub id: "Repo id must be in the form 'repo_name' or
    'namespace/repo_name'"."""
    (tmp_path / "d.jsonl").write_text(json.dumps(row("Q?", 3)) + "\n")
    missing = tmp_path / "no-such-model"
    (tmp_path / "sft.yaml").write_text(f"model: {missing}\ndata: d.jsonl\noutput_dir: run\n")
    assert main(["train", "sft", str(tmp_path / "sft.yaml"), "--quiet"]) == 3
    err = capsys.readouterr().err
    assert f"model {missing}: no such folder or file" in err and "Traceback" not in err


def test_an_out_that_is_a_file_is_one_line_for_toy_world_and_export_verl(tmp_path, capsys):
    """Each was a traceback: NotADirectoryError (toy-world), FileExistsError (export-verl)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert main(["train", "toy-world", str(a_file)]) == 2
    assert "is a file; OUT names a folder" in capsys.readouterr().err
    assert main(["train", "export-verl", "--questions", "pydocs", "--out", str(a_file)]) == 3
    err = capsys.readouterr().err
    assert "cannot write under" in err and "--out names a folder" in err and "Traceback" not in err
    assert a_file.read_text() == "x"
