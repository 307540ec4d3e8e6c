"""The command line's messages name the flag to change and a fix that works (issue 26): each refusal is triggered,
then the fix it names is applied and succeeds. Also: a command's errors show its own usage line, every command's
``--help`` has a description, one meaning per flag name (old spellings warn), and ``--max-turns`` says what it
counts."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.cli import build_parser, main
from venus_edge.engines.batched import BatchedLlamaCppEngine
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.engines.models import resolve_model
from venus_edge.errors import ContextSettingsError, ModelNotFoundError
from venus_edge.flags import DEPRECATED_UNTIL
from venus_edge.memory import MAX_THREADS
from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
from venus_edge.toolbox import default_tools

#: A run that gets past every check quickly: one research turn and the forced answer, a few tokens each.
SHORT_RUN = ["--max-turns", "1", "--max-tokens", "8", "--no-prompt-cache", "--quiet"]


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return int(found.group(1).replace(",", ""))


def _research(model: Path | str, corpus: Path, *flags: str) -> int:
    return main(["research", "Which module reads TOML?", "--model", str(model), "--corpus", str(corpus),
                 "--threads", "1", *SHORT_RUN, *flags])


# ---------------------------------------------------------------------------------------------- the context window


def test_a_window_too_small_names_the_flags_and_a_window_that_works(smollm2_gguf, docs_corpus, capsys):
    """``--n-ctx 10`` named ``answer_reserve_tokens``; following it (``--answer-reserve 2``) was refused again with
    "at most 0". Now: the flags, and no advice to lower the reserve where that cannot help."""
    assert _research(smollm2_gguf, docs_corpus, "--n-ctx", "10", "--answer-reserve", "1024") == 3
    message = _error_line(capsys)
    assert "--answer-reserve (1,024) must be smaller than --n-ctx (10)" in message, message
    assert "answer_reserve_tokens" not in message and "cannot help" in message, message
    assert _research(smollm2_gguf, docs_corpus, "--n-ctx", "10", "--answer-reserve", "2") == 3
    message = _error_line(capsys)
    assert "lower --answer-reserve to at most" not in message and "cannot help" in message, message
    needed = _number(r"Raise --n-ctx to at least ([\d,]+)", message)
    assert _research(smollm2_gguf, docs_corpus, "--n-ctx", str(needed), "--answer-reserve", "2") in (0, 1)
    assert "error" not in capsys.readouterr().err


def test_a_reserve_too_large_names_a_reserve_that_works(smollm2_gguf, docs_corpus, capsys):
    assert _research(smollm2_gguf, docs_corpus, "--n-ctx", "1000", "--answer-reserve", "1024") == 3
    message = _error_line(capsys)
    reserve = _number(r"Lower it to at most ([\d,]+)", message)
    assert reserve > 0 and "--n-ctx" in message, message
    assert _research(smollm2_gguf, docs_corpus, "--n-ctx", "1000", "--answer-reserve", str(reserve)) in (0, 1)
    assert "error" not in capsys.readouterr().err


def test_the_python_api_names_its_own_parameters(docs_corpus):
    """The same refusal from Python names the parameters, and the CLI's naming is a view of the same error."""
    with pytest.raises(ContextSettingsError) as refused:
        Agent(ScriptedEngine([], n_ctx=10), default_tools([docs_corpus]), config=AgentConfig(answer_reserve_tokens=2))
    assert "answer_reserve_tokens" in str(refused.value) and "n_ctx" in str(refused.value)
    assert "--n-ctx" not in str(refused.value)
    assert "--answer-reserve" in refused.value.message_for({"answer_reserve_tokens": "--answer-reserve"})


def test_a_window_beyond_the_machine_is_refused_with_one_that_fits(smollm2_gguf, docs_corpus, capsys):
    """``--n-ctx 99999999999`` was a llama.cpp ``std::bad_alloc`` load failure."""
    assert _research(smollm2_gguf, docs_corpus, "--n-ctx", "99999999999") == 3
    message = _error_line(capsys)
    assert "more than this machine's" in message and "trained on 8,192 tokens" in message, message
    window = _number(r"give --n-ctx (\d+)", message)
    assert _research(smollm2_gguf, docs_corpus, "--n-ctx", str(window)) in (0, 1)
    assert "error" not in capsys.readouterr().err


@pytest.mark.parametrize("command, flag", [(["research", "q"], "--samples"), (["serve"], "--slots")])
def test_too_many_samples_at_once_name_their_own_flag_and_how_many_fit(command, flag, smollm2_gguf, docs_corpus,
                                                                       capsys):
    """``--samples 100000`` said "--n-ctx 819,200,000 needs ... give --n-ctx 8192": a flag the user never gave, and
    a fix that did not help. It names the samples (``serve``: its ``--slots``) and the most that fit, by the same
    estimate the batched engine checks (the fix itself would allocate most of the machine's memory)."""
    from venus_edge.memory.header import read_model_header
    from venus_edge.memory.machine import total_ram_bytes

    code = main([*command, "--model", str(smollm2_gguf), "--corpus", str(docs_corpus), flag, "100000"])
    assert code == 3
    message = _error_line(capsys)
    assert message.startswith(f"error: {flag} 100,000 at 8,192 tokens each needs") and "--n-ctx 819" not in message
    fits = _number(rf"lower {flag} to (\d+)", message)
    header, machine = read_model_header(smollm2_gguf), total_ram_bytes()
    assert machine is not None and 1 <= fits < 100_000
    plan = BatchedLlamaCppEngine.memory_plan  # the engine's own price: its KV cells and visit's
    assert plan(header, n_seq=fits, n_ctx=8192 * fits).total_bytes <= machine
    assert plan(header, n_seq=fits + 1, n_ctx=8192 * (fits + 1)).total_bytes > machine


def test_thread_counts_past_llama_cpps_limit_are_refused_before_it_crashes(smollm2_gguf, capsys):
    """``--threads 100000`` was a segmentation fault inside llama.cpp."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["research", "q", "--threads", "100000"])
    assert f"argument --threads: must be at most {MAX_THREADS}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=f"n_threads must be from 1 to {MAX_THREADS}"):
        LlamaCppEngine(smollm2_gguf, n_ctx=256, n_threads=100_000)


# ---------------------------------------------------------------------------------------------- the model


def test_a_folder_as_model_names_the_gguf_inside_it(smollm2_gguf, tmp_path, capsys):
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(smollm2_gguf, folder / "one.gguf")
    assert main(["plan", str(folder)]) == 3
    message = _error_line(capsys)
    assert "it is a folder" in message and "no such file" not in message, message
    named = message.split("give the file inside it: ")[1].rstrip(".")
    assert named == str(folder / "one.gguf")
    assert main(["plan", named]) == 0


@pytest.mark.parametrize(("argv", "given_as"), [
    (["plan", "{missing}"], "venus-edge plan"),
    (["bench", "{missing}"], "venus-edge bench"),
    (["research", "q", "--corpus", "{corpus}", "--model", "{missing}"], "--model"),
    (["eval", "pydocs", "--corpus", "{corpus}", "--model", "{model}", "--judge", "{missing}", "--limit", "1"],
     "--judge"),
    (["bench", "{model}", "--reference", "{missing}"], "--reference"),
])
def test_a_missing_model_is_asked_for_the_way_the_command_takes_it(argv, given_as, smollm2_gguf, docs_corpus,
                                                                     tmp_path, capsys):
    """``plan`` and ``bench`` take the model as their first argument, ``eval`` takes a judge by ``--judge``: the
    advice said "--model" for each (``bench --reference`` too, and offered a hub repo it does not take)."""
    values = {"missing": str(tmp_path / "missing.gguf"), "corpus": str(docs_corpus), "model": str(smollm2_gguf)}
    assert main([arg.format(**values) for arg in argv]) == 3
    message = _error_line(capsys)
    examples = re.findall(r"\(([^()]*) (?:/path/to/model|F16)\.gguf\)", message)
    assert examples == [given_as], message
    if argv[0] == "plan":  # the advice applied
        assert main(["plan", str(smollm2_gguf)]) == 0


def test_a_folder_of_several_or_no_ggufs_lists_them_or_says_what_to_give(smollm2_gguf, tmp_path):
    for name in ("a-Q8_0.gguf", "a-Q4_K_M.gguf"):
        shutil.copy(smollm2_gguf, tmp_path / name)
    with pytest.raises(ModelNotFoundError, match=r"one of the 2 files in it: .*a-Q4_K_M\.gguf, .*a-Q8_0\.gguf"):
        resolve_model(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match=r"a folder with no \.gguf file in it"):
        resolve_model(tmp_path / "empty")


def test_inspect_and_resume_say_a_folder_is_a_folder(smollm2_gguf, tmp_path, docs_corpus, capsys):
    shutil.copy(smollm2_gguf, tmp_path / "m.gguf")
    assert main(["inspect", str(tmp_path)]) == 3
    message = _error_line(capsys)
    assert "give the file inside it" in message and "Re-create" not in message, message
    assert main(["research", "--resume", str(tmp_path), "--corpus", str(docs_corpus)]) == 3
    assert "it is a folder with no .jsonl file in it" in _error_line(capsys)


def test_offline_the_hub_error_does_not_ask_to_go_offline(tmp_path, smollm2_gguf, monkeypatch):
    """With ``HF_HUB_OFFLINE=1`` set, the error said to set it. It says to fetch the file into the cache; done (here
    by writing the cache's layout), the same spec resolves."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as missing:
        resolve_model("acme/Model-GGUF:model-Q4_K_M.gguf", cache_dir=tmp_path)
    message = str(missing.value)
    assert "set HF_HUB_OFFLINE=1" not in message and "HF_HUB_OFFLINE is set" in message, message
    assert "hf download acme/Model-GGUF model-Q4_K_M.gguf" in message, message
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--acme--Model-GGUF"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    (repo / "snapshots" / revision).mkdir(parents=True)
    shutil.copy(smollm2_gguf, repo / "snapshots" / revision / "model-Q4_K_M.gguf")
    assert resolve_model("acme/Model-GGUF:model-Q4_K_M.gguf", cache_dir=tmp_path).is_file()


# ---------------------------------------------------------------------------------------------- ports


@pytest.fixture()
def taken_port():
    """A port another program listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_serve_on_a_port_in_use_says_so_before_loading_anything(taken_port, docs_corpus, capsys):
    """It printed its banner, loaded the model, then failed with ``address already in use``. The model here does
    not exist: the port is checked first."""
    code = main(["serve", "--model", "/nonexistent/model.gguf", "--corpus", str(docs_corpus),
                 "--port", str(taken_port)])
    captured = capsys.readouterr()
    assert code == 3 and "venus-edge serve:" not in captured.err, captured.err
    assert captured.err.startswith(f"error: --port {taken_port}: 127.0.0.1:{taken_port} is already in use")
    assert "--port 0 for any free one" in captured.err and captured.err.count("\n") == 1, captured.err


def test_serve_on_port_0_takes_a_free_port_and_says_which(smollm2_gguf, docs_corpus, tmp_path):
    """The fix the port message names."""
    command = [sys.executable, "-m", "venus_edge.cli", "serve", "--model", str(smollm2_gguf), "--corpus",
               str(docs_corpus), "--n-ctx", "2048", "--threads", "1", "--no-prompt-cache", "--port", "0",
               "--journal", str(tmp_path / "j.jsonl")]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        banner = process.stderr.readline()  # type: ignore[union-attr]
        port = _number(r"http://127\.0\.0\.1:(\d+)/", banner)
        assert port != 0
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read()  # type: ignore[union-attr]
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_mcp_over_http_on_a_port_in_use_says_so_before_loading_anything(taken_port, docs_corpus, capsys):
    code = main(["mcp", "--transport", "http", "--model", "/nonexistent/model.gguf", "--corpus", str(docs_corpus),
                 "--port", str(taken_port)])
    err = capsys.readouterr().err
    assert code == 3 and err.startswith(f"error: --port {taken_port}:") and "choose another --port" in err, err


@pytest.mark.parametrize("argv", [["serve", "--port", "65536"], ["serve", "--port", "-1"], ["mcp", "--port", "0"],
                                  ["serve", "--port", "http"]])
def test_ports_outside_the_range_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2 and "argument --port" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- usage lines


@pytest.mark.parametrize("argv, command", [
    (["research", "q"], "research"),
    (["eval", "pydocs"], "eval"),
    (["serve", "--corpus", ".", "--host", "0.0.0.0"], "serve"),
    (["bench", "m.gguf", "--n-ctx", "5"], "bench"),
    (["mcp", "--transport", "http", "--host", "0.0.0.0", "--corpus", "."], "mcp"),
])
def test_a_commands_error_shows_that_commands_usage(argv, command, capsys):
    """Errors found after parsing printed ``usage: venus-edge [-h] COMMAND ...``."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith(f"usage: venus-edge {command} ") and f"venus-edge {command}: error: " in err, err


def _commands():
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    return commands.choices


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_commands_help_has_a_description_with_an_example(name, capsys):
    with pytest.raises(SystemExit):
        main([name, "--help"])
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]
    assert len(description) > 100, out
    assert re.search(rf"^examples?:\n  venus-edge {name} ", out, re.MULTILINE), out


def _train_steps():
    train = _commands()["train"]
    return next(a for a in train._actions if a.dest == "train_command").choices


@pytest.mark.parametrize("step", sorted(_train_steps()))
def test_every_training_steps_help_has_an_example_whose_files_exist(step, capsys):
    """README promises an example in each command's help; the train steps had none."""
    with pytest.raises(SystemExit):
        main(["train", step, "--help"])
    out = capsys.readouterr().out
    found = re.search(rf"^example:\n  (venus-edge train {step} .+)$", out, re.MULTILINE)
    assert found, out
    for word in found.group(1).split():  # a config the example names ships with the repository
        if word.startswith("configs/"):
            assert (Path(__file__).parents[1] / word).is_file(), word
    assert build_parser().parse_args(found.group(1).split()[1:]).train_command == step  # it parses


# ---------------------------------------------------------------------------------------------- one meaning per name


@pytest.mark.parametrize("argv, dest, value, old, new", [
    (["research", "q", "--api-key", "k"], "api_key", "k", "--api-key", "--engine-api-key"),
    (["eval", "pydocs", "--api-key", "k"], "api_key", "k", "--api-key", "--engine-api-key"),
    (["serve", "--api-key", "k"], "server_api_key", "k", "--api-key", "--server-api-key"),
    (["bench", "m.gguf", "--kv", "f16,q8_0"], "kv", ("f16", "q8_0"), "--kv", "--kv-type"),
    (["bench", "m.gguf", "--session", "s.jsonl"], "journal", Path("s.jsonl"), "--session", "--journal"),
])
def test_an_old_spelling_still_works_and_warns(argv, dest, value, old, new, capsys):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert err == f"warning: {old} is deprecated and goes away in venus-edge {DEPRECATED_UNTIL}; use {new}\n"


@pytest.mark.parametrize("argv, dest, value", [
    (["research", "q", "--engine-api-key", "k"], "api_key", "k"),
    (["serve", "--engine-api-key", "k"], "api_key", "k"),
    (["mcp", "--engine-api-key", "k"], "api_key", "k"),
    (["serve", "--server-api-key", "s"], "server_api_key", "s"),
    (["bench", "m.gguf", "--kv-type", "q8_0"], "kv", ("q8_0",)),
    (["bench", "m.gguf", "--threads", "1,2"], "threads", (1, 2)),
    (["bench", "m.gguf", "--journal", "s.jsonl"], "journal", Path("s.jsonl")),
])
def test_the_new_names_are_taken_without_a_warning(argv, dest, value, capsys):
    assert getattr(build_parser().parse_args(argv), dest) == value
    assert capsys.readouterr().err == ""


def test_serve_keeps_its_own_key_apart_from_the_model_servers():
    args = build_parser().parse_args(["serve", "--engine-api-key", "model", "--server-api-key", "mine"])
    assert (args.api_key, args.server_api_key) == ("model", "mine")


@pytest.mark.parametrize("name, old", [("research", "--api-key"), ("serve", "--api-key"), ("bench", "--kv "),
                                       ("bench", "--session")])
def test_old_spellings_are_hidden_from_help(name, old, capsys):
    with pytest.raises(SystemExit):
        main([name, "--help"])
    assert old not in capsys.readouterr().out.replace("--kv-type", "")


def test_the_old_spelling_keeps_its_exclusions(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "m.gguf", "--session", "s.jsonl", "--no-session"])
    assert "not allowed with argument --session" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "100000", "2,x", ","])
def test_bench_threads_are_checked_as_research_checks_them(value, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "m.gguf", "--threads", value])
    assert "argument --threads" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- --max-turns


def test_max_turns_counts_research_turns_and_then_asks_for_the_answer(docs_corpus):
    """``--max-turns 2`` ran 3 turns: two research turns, then the final-answer turn the protocol adds at the limit
    (PROTOCOL.md, "Decoding and limits"). The help says so."""
    engine = ScriptedEngine([tool_call_turn("search", query=["tomllib"]), tool_call_turn("search", query=["toml"]),
                             answer_turn("tomllib")])
    result = Agent(engine, default_tools([docs_corpus]), config=AgentConfig(max_turns=2)).run("Which module?")
    assert (result.turns, result.termination, result.answer) == (3, "answered_max_steps", "tomllib")
    research = _commands()["research"]
    help_text = next(a.help for a in research._actions if "--max-turns" in a.option_strings)
    assert "research turns at most" in help_text and "one more turn" in help_text, help_text
