"""Crash safety: a session killed with SIGKILL mid-turn resumes from its journal and ends with the trajectory an
uninterrupted run makes: no turn lost or repeated. The model is scripted (a function of the prompt, so that it
answers the same in any process), the tools are the real corpus tools, recorded in the uninterrupted run and
replayed in the killed and the resumed one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.cli import main
from venus_edge.errors import TrajectoryError
from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
from venus_edge.toolbox import default_tools
from venus_edge.trajectory import read_journal

# The child process runs this: the scripted researcher of tests/test_context.py, which stops to sleep (and says so in
# a marker file) on its KILL_AT-th generation (from 0), so that the parent can kill it in the middle of that turn.
CHILD = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_resume import researcher, make_agent
    corpus, journal, marker, kill_at, policy, replay = sys.argv[1:7]

    calls = []

    def slow(prompt):
        calls.append(prompt)
        if len(calls) - 1 == int(kill_at):
            Path(marker).write_text("generating")
            time.sleep(300)
        return researcher(prompt)

    make_agent(slow, Path(corpus), Path(journal), policy, replay=Path(replay)).run("Which modules did you read about?")
''')
QUERIES = ["tomllib", "pickle protocol", "json module", "asyncio", "pathlib", "dataclasses", "typing", "zipfile"]
N_CTX = 9_000


def researcher(prompt: str) -> str:
    """Searches each of QUERIES once (those in the conversation, and those its notes say it made), then answers;
    asked for notes (the summarize notice), writes them."""
    from venus_edge import protocol

    last = prompt.rsplit(protocol.IM_START, 2)[-2]
    if protocol.CONTEXT_LIMIT_NOTICE in last:
        return answer_turn("what I have")
    if protocol.SUMMARY_NOTICE in last:
        made = [q for q in QUERIES if f'"query": ["{q}"]' in prompt]
        return answer_turn("searched: " + "; ".join(made))
    notes = prompt.split("searched: ", 1)[1].split("\n")[0] if "searched: " in prompt else ""
    done = {q for q in QUERIES if f'"query": ["{q}"]' in prompt or q in notes.split("; ")}
    todo = [q for q in QUERIES if q not in done]
    return tool_call_turn("search", query=[todo[0]]) if todo else answer_turn("all of them")


def make_agent(policy_fn, corpus: Path, journal: Path, policy: str, *, record: Path | None = None,
               replay: Path | None = None) -> Agent:
    config = AgentConfig(answer_reserve_tokens=400, context_policy=policy, keep_last=1, seed=7)
    tools = default_tools([] if replay else [corpus], record_dir=record, replay_dir=replay)
    return Agent(ScriptedEngine(policy_fn, n_ctx=N_CTX), tools, config=config, trajectory_path=journal)


def _comparable(trajectory) -> dict:
    return {
        "turns": [(t.index, t.kind, t.content, t.tool_call, t.observation, t.replaces_last_observation, t.attempts)
                  for t in trajectory.turns],
        "compactions": [{k: c[k] for k in ("turn", "policy", "messages", "call_keys", "tokens_before", "tokens_after")}
                        for c in trajectory.compactions],
        "messages": trajectory.messages, "termination": trajectory.termination, "answer": trajectory.answer,
        "sources": trajectory.sources, "question": trajectory.question, "system_prompt": trajectory.system_prompt,
    }


@pytest.mark.parametrize("policy, kill_at", [("force-answer", 2), ("keep-last-k", 5), ("summarize", 5)])
def test_a_session_killed_mid_turn_resumes_to_the_uninterrupted_trajectory(docs_corpus, tmp_path, policy, kill_at):
    reference_journal, records = tmp_path / "reference.jsonl", tmp_path / "records"
    make_agent(researcher, docs_corpus, reference_journal, policy, record=records).run(
        "Which modules did you read about?")
    [reference] = read_journal(reference_journal).trajectories
    assert len(reference.turns) > kill_at, "the kill must land inside the session"

    journal, marker = tmp_path / "killed.jsonl", tmp_path / "marker"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(tests=str(Path(__file__).parent)), str(docs_corpus), str(journal),
         str(marker), str(kill_at), policy, str(records)], env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, "the child ended before the kill"
            assert time.monotonic() < deadline, "the child never reached the turn to kill"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    [killed] = read_journal(journal).trajectories
    assert killed.termination == "incomplete" and 0 < len(killed.turns) < len(reference.turns)
    assert _comparable(killed)["turns"] == _comparable(reference)["turns"][: len(killed.turns)]

    result = make_agent(researcher, docs_corpus, tmp_path / "unused.jsonl", policy, replay=records).resume(journal)
    assert not (tmp_path / "unused.jsonl").exists()  # the resumed session goes on in its own journal
    [resumed] = read_journal(journal).trajectories
    assert [t.index for t in resumed.turns] == list(range(len(resumed.turns)))  # none lost, none repeated
    assert _comparable(resumed) == _comparable(reference)
    assert result.session_id == killed.session_id
    assert result.answer == reference.answer and result.totals.resumed_at_turn == len(killed.turns)


def test_resume_refuses_what_cannot_be_resumed(docs_corpus, tmp_path):
    journal = tmp_path / "t.jsonl"
    agent = make_agent(researcher, docs_corpus, journal, "force-answer")
    agent.run("Which modules did you read about?")
    [done] = read_journal(journal).trajectories
    with pytest.raises(TrajectoryError, match="every session in the journal ended; nothing to resume"):
        agent.resume(journal)
    with pytest.raises(TrajectoryError, match=f"session {done.session_id} ended \\(answered_token_limit\\)"):
        agent.resume(journal, done.session_id)
    with pytest.raises(TrajectoryError, match="no session nope in the journal"):
        agent.resume(journal, "nope")
    with pytest.raises(TrajectoryError, match="no such file"):
        agent.resume(tmp_path / "missing.jsonl")


def test_resume_refuses_other_tools(docs_corpus, tmp_path):
    journal = tmp_path / "t.jsonl"
    lines = []
    agent = make_agent(researcher, docs_corpus, journal, "force-answer")
    agent.run("Which modules did you read about?")
    for line in journal.read_text().splitlines():
        record = json.loads(line)
        if record["record"] != "end":
            lines.append(line)
    journal.write_text("\n".join(lines) + "\n")  # as if killed before the end record
    search_only = [t for t in default_tools([docs_corpus]) if t.name == "search"]
    other = Agent(ScriptedEngine(researcher, n_ctx=N_CTX), search_only, config=AgentConfig(answer_reserve_tokens=400))
    with pytest.raises(TrajectoryError, match=r"recorded with the tools \['search', 'visit'\]; this agent has "
                                              r"\['search'\]: resume with the same tools"):
        other.resume(journal)
    # Killed after its answer but before its end record: resuming only writes the end.
    result = agent.resume(journal)
    assert result.termination == "answered_token_limit" and result.answer == "what I have"
    assert read_journal(journal).trajectories[0].termination == "answered_token_limit"


def test_cli_resume_flags_are_checked(tmp_path, docs_corpus, capsys):
    journal = str(tmp_path / "j.jsonl")
    for argv in (["research", "a question", "--resume", journal], ["research", "--resume", journal, "a question"]):
        with pytest.raises(SystemExit):
            main([*argv, "--corpus", str(docs_corpus)])
        assert "--resume continues a recorded session: give no question" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["research", "--corpus", str(docs_corpus)])
    assert "give the question to research (or --resume FILE)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["research", "a question", "--session", "abc", "--corpus", str(docs_corpus)])
    assert "--session ID goes with --resume FILE" in capsys.readouterr().err


RAMBLE = "Let me think about this. " * 600  # longer than any budget here: cut at the budget
RAMBLED: list[str] = []


def rambler(prompt: str) -> str:
    """The researcher, who rambles past the budget once, when the prompt is long and json is next."""
    turn = researcher(prompt)
    if '"query": ["json module"]' in turn and len(prompt) > N_CTX - 3_500:
        RAMBLED.append(prompt)
        return RAMBLE
    return turn


@pytest.mark.parametrize("policy", ["force-answer", "keep-last-k", "summarize"])
def test_resume_at_every_record_boundary_gives_the_uninterrupted_session(docs_corpus, tmp_path, policy):
    """A kill can land between any two journal records (a turn in flight is never written): for each prefix of the
    journal, resuming gives the uninterrupted trajectory, with the same seeds drawn from the kill on."""
    RAMBLED.clear()
    reference_journal = tmp_path / "reference.jsonl"
    reference_agent = make_agent(rambler, docs_corpus, reference_journal, policy)
    reference_agent.run("Which modules did you read about?")
    reference_seeds = reference_agent.engine.seeds
    [reference] = read_journal(reference_journal).trajectories
    lines = reference_journal.read_text().splitlines(keepends=True)
    assert RAMBLED, "a turn must be cut at the budget in the reference session"
    assert any(json.loads(line)["record"] == "compaction" for line in lines) or policy == "force-answer"
    for cut in range(1, len(lines) - 1):  # at least the start record; at most everything but the end
        journal = tmp_path / f"cut{cut}.jsonl"
        journal.write_text("".join(lines[:cut]))
        agent = make_agent(rambler, docs_corpus, tmp_path / "unused.jsonl", policy)
        result = agent.resume(journal)
        [resumed] = read_journal(journal).trajectories
        assert _comparable(resumed) == _comparable(reference), f"cut after record {cut}"
        assert agent.engine.seeds == reference_seeds[len(reference_seeds) - len(agent.engine.seeds):]
        assert result.trajectory_path == journal and result.answer == reference.answer


def test_resume_at_another_n_ctx_warns(docs_corpus, tmp_path, caplog):
    journal = tmp_path / "t.jsonl"
    make_agent(researcher, docs_corpus, journal, "keep-last-k").run("Which modules did you read about?")
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:3]))  # the start record and two turns: killed in the third
    config = AgentConfig(answer_reserve_tokens=400)
    wider = Agent(ScriptedEngine(researcher, n_ctx=N_CTX + 1_000), default_tools([docs_corpus]), config=config)
    with caplog.at_level("WARNING", logger="venus_edge.agent"):
        wider.resume(journal)
    assert f"at n_ctx {N_CTX + 1_000:d}; it ran at {N_CTX:d}" in caplog.text
    caplog.clear()
    journal.write_text("".join(lines[:3]))
    with caplog.at_level("WARNING", logger="venus_edge.agent"):
        make_agent(researcher, docs_corpus, tmp_path / "unused.jsonl", "keep-last-k").resume(journal)
    assert "n_ctx" not in caplog.text
