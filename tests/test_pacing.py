"""Pacing a session on a device that heats and drains (``venus_edge.pacing``), on fake /sys trees written as real
files whose values the tests change while a scripted session runs: threads lowered when hot and given back when
cool, a pause that lasts until the zone cools (the test cools it when it sees the pause), a clean stop on a low
battery that the journal resumes, and files that cannot be read said once while the session goes on. The CLI's
``--pace`` runs the real model on a fake root; ``LlamaCppEngine.set_threads`` is checked on llama.cpp's own
counters."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.cli import _Progress, main
from venus_edge.engines.base import ThreadControl
from venus_edge.events import Event, Paced, SessionFinished, TurnCompleted, TurnStarted
from venus_edge.memory.sensors import read_sensors
from venus_edge.pacing import PaceConfig
from venus_edge.result import BATTERY_LOW
from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
from venus_edge.toolbox import default_tools
from venus_edge.trajectory import read_journal

QUESTION = "When was tomllib added to Python?"
SEARCHES = [tool_call_turn("search", query=[query]) for query in ("tomllib", "tomllib added", "tomllib 3.11")]


class FakeDevice:
    """A /sys tree under ``root`` with a CPU zone, a battery zone, a battery and a charger, as real files."""

    def __init__(self, root: Path, *, cpu_c: float = 45.0, battery: tuple[str, int] = ("Discharging", 80)) -> None:
        self.root = root
        self.thermal = root / "sys" / "class" / "thermal"
        self.supplies = root / "sys" / "class" / "power_supply"
        for index, name in enumerate(("cpu-thermal", "battery")):
            (self.thermal / f"thermal_zone{index}").mkdir(parents=True)
            (self.thermal / f"thermal_zone{index}" / "type").write_text(f"{name}\n")
        (self.thermal / "thermal_zone1" / "temp").write_text("31000\n")
        for name, kind in (("battery", "Battery"), ("ac", "Mains")):
            (self.supplies / name).mkdir(parents=True)
            (self.supplies / name / "type").write_text(f"{kind}\n")
        self.cpu(cpu_c)
        self.battery(*battery)

    def cpu(self, celsius: float) -> None:
        (self.thermal / "thermal_zone0" / "temp").write_text(f"{round(celsius * 1000)}\n")

    def battery(self, status: str, percent: int) -> None:
        (self.supplies / "battery" / "status").write_text(f"{status}\n")
        (self.supplies / "battery" / "capacity").write_text(f"{percent}\n")


@pytest.fixture()
def tools(docs_corpus):
    return default_tools([docs_corpus])


def pace(device: FakeDevice, **settings: Any) -> PaceConfig:
    values: dict[str, Any] = {"max_temp_c": 70.0, "pause_temp_c": 80.0, "resume_temp_c": 60.0,
                              "battery_floor_pct": 15, "min_threads": 1, "poll_s": 0.001, "max_pause_s": 600.0}
    return PaceConfig(root=device.root, **(values | settings))


def drive(stream: Iterator[Event], on_event: Any) -> list[Event]:
    """Every event of ``stream``; ``on_event(event)`` runs as each arrives, before the loop goes on (so a file it
    changes is what the next check reads)."""
    events = []
    for event in stream:
        events.append(event)
        on_event(event)
    return events


def paced(events: list[Event]) -> list[Paced]:
    return [event for event in events if isinstance(event, Paced)]


def test_heat_lowers_the_threads_pauses_until_the_zone_cools_and_gives_the_threads_back(tools, tmp_path):
    """72 C (above max 70) halves the threads before the next turn; 85 C (above pause 80) pauses, and the pause
    ends once the file says 55 C (at or below resume 60); at 55 C the threads taken away come back. Each action is an
    event before its turn, a journal record and a CLI line."""
    device = FakeDevice(tmp_path / "phone")
    engine = ScriptedEngine([*SEARCHES, answer_turn("Python 3.11")], n_threads=4)
    journal = tmp_path / "t.jsonl"
    agent = Agent(engine, tools, trajectory_path=journal, pace=pace(device))
    heat_after_turn = {0: 72.0, 1: 85.0}
    threads_per_turn: dict[int, int] = {}

    def on_event(event: Event) -> None:
        if isinstance(event, TurnCompleted) and event.turn in heat_after_turn:
            device.cpu(heat_after_turn[event.turn])
        if isinstance(event, Paced) and event.action == "paused":
            device.cpu(55.0)  # the device cools while the session waits
        if isinstance(event, TurnStarted):
            threads_per_turn[event.turn] = engine.n_threads

    events = drive(agent.events(QUESTION), on_event)
    result = events[-1].result
    assert result.termination == "answered" and result.answer == "Python 3.11"
    actions = [(event.turn, event.action, event.n_threads) for event in paced(events)]
    assert actions == [(1, "threads_lowered", 2), (2, "paused", 2), (2, "resumed", 2), (3, "threads_raised", 4)]
    assert engine.thread_changes == [2, 4]
    assert threads_per_turn == {0: 4, 1: 2, 2: 2, 3: 4}, "each change applies from the next turn on"
    lowered, paused, resumed, raised = paced(events)
    assert raised.celsius == 55.0 and "threads 2 -> 4" in raised.detail
    assert lowered.celsius == 72.0 and lowered.zone == "cpu-thermal"
    assert "cpu-thermal at 72.0 C, at or above 70 C: threads 4 -> 2" in lowered.detail
    assert paused.celsius == 85.0 and "pausing until 60 C" in paused.detail
    assert resumed.celsius == 55.0 and "cooled" in resumed.detail and resumed.waited_s is not None
    # Not a speed bound: a pause that ignored the cooled file would end only at its cap, 600 s.
    assert resumed.waited_s < agent.pace.max_pause_s, "the pause ended when the zone cooled, not at its cap"
    [trajectory] = read_journal(journal).trajectories
    assert trajectory.termination == "answered"
    assert [{k: v for k, v in record.items() if k not in ("record", "session_id")} for record in trajectory.paces] \
        == [{k: v for k, v in event.to_dict().items() if k != "type"} for event in paced(events)]
    out = io.StringIO()
    progress = _Progress(out, quiet=False)
    for event in paced(events):
        progress.show(event)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"  ~ pacing (threads lowered): {lowered.detail}"
    assert lines[1].startswith("  ~ pacing (paused): ")


def test_a_pause_starts_when_no_thread_is_left_to_take_away_and_ends_at_its_limit(tools, tmp_path):
    """Above max_temp_c with the threads at min_threads, the session pauses (it cannot slow down otherwise); a zone
    that never cools ends the pause at max_pause_s, and the session goes on, saying it is still hot."""
    device = FakeDevice(tmp_path / "phone", cpu_c=75.0)
    engine = ScriptedEngine([SEARCHES[0], answer_turn("Python 3.11")], n_threads=2)
    agent = Agent(engine, tools, pace=pace(device, min_threads=2, max_pause_s=0.01))
    events = drive(agent.events(QUESTION), lambda event: None)
    assert events[-1].result.termination == "answered"
    actions = [(event.turn, event.action) for event in paced(events)]
    assert actions == [(0, "paused"), (0, "resumed"), (1, "paused"), (1, "resumed")]
    resumed = paced(events)[1]
    assert "still hot after the longest pause; going on" in resumed.detail
    assert resumed.waited_s is not None and resumed.waited_s >= 0.01
    assert engine.thread_changes == []


class NoThreadControl:
    """A scripted engine without ``set_threads``, as a model server (its threads are the server's)."""

    concurrent_rollouts = False

    def __init__(self, inner: ScriptedEngine) -> None:
        self.inner = inner
        self.n_ctx = inner.n_ctx

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        return self.inner.tokenize(text)

    def detokenize(self, token_ids: Any) -> str:
        return self.inner.detokenize(token_ids)

    def generate(self, prompt_ids: Any, **options: Any) -> Any:
        return self.inner.generate(prompt_ids, **options)

    def model_info(self) -> dict[str, Any]:
        return self.inner.model_info()


def test_an_engine_that_cannot_change_its_threads_pauses_instead(tools, tmp_path):
    device = FakeDevice(tmp_path / "phone", cpu_c=72.0)
    engine = NoThreadControl(ScriptedEngine([answer_turn("Python 3.11")]))
    assert not isinstance(engine, ThreadControl) and isinstance(engine.inner, ThreadControl)
    events = drive(Agent(engine, tools, pace=pace(device)).events(QUESTION),
                   lambda event: device.cpu(50.0) if isinstance(event, Paced) else None)
    assert [(event.action, event.n_threads) for event in paced(events)] == [("paused", None), ("resumed", None)]
    assert events[-1].result.termination == "answered"


def test_a_discharging_battery_below_the_floor_stops_cleanly_and_the_journal_resumes(tools, tmp_path):
    """At 9% and discharging (floor 15%) the session stops before its next turn with termination ``battery_low``:
    no end record, every complete turn journaled, so ``Agent.resume`` continues it once the device charges and it
    ends as an uninterrupted run would."""
    device = FakeDevice(tmp_path / "phone", battery=("Discharging", 40))
    journal = tmp_path / "t.jsonl"
    turns = [SEARCHES[0], SEARCHES[1], answer_turn("Python 3.11")]
    first = ScriptedEngine(list(turns))
    drained = drive(Agent(first, tools, config=AgentConfig(seed=3), trajectory_path=journal,
                          pace=pace(device)).events(QUESTION),
                    lambda event: device.battery("Discharging", 9) if isinstance(event, TurnCompleted) else None)
    stopped = drained[-1].result
    assert stopped.termination == BATTERY_LOW and stopped.answer is None and stopped.turns == 1
    [stop] = paced(drained)
    assert (stop.turn, stop.action, stop.battery_pct) == (1, "battery_stop", 9)
    assert "battery battery at 9% and discharging, below the 15% floor" in stop.detail
    [trajectory] = read_journal(journal).trajectories
    assert trajectory.termination == "incomplete" and len(trajectory.turns) == 1 and trajectory.end == {}
    assert [record["action"] for record in trajectory.paces] == ["battery_stop"]

    device.battery("Charging", 9)  # plugged in: charging, whatever the charge
    second = ScriptedEngine(turns[1:])
    resumed = Agent(second, tools, trajectory_path=journal, pace=pace(device)).resume(journal)
    assert resumed.termination == "answered" and resumed.answer == "Python 3.11"
    assert resumed.totals.resumed_at_turn == 1 and resumed.session_id == stopped.session_id
    [whole] = read_journal(journal).trajectories
    assert [turn.index for turn in whole.turns] == [0, 1, 2] and whole.termination == "answered"
    uninterrupted = Agent(ScriptedEngine(list(turns)), tools, config=AgentConfig(seed=3)).run(QUESTION)
    assert whole.messages[1:] == uninterrupted.messages[1:], "nothing repeated or lost across the stop"
    assert second.seeds[0] == first.seeds[-1] + 1, "sampling continues where it stopped"


def test_the_battery_floor_applies_only_below_it_and_only_on_battery(tools, tmp_path):
    """At the floor exactly, or charging below it, or full: the session runs to its answer."""
    for status, percent in (("Discharging", 15), ("Charging", 3), ("Full", 100), ("Not charging", 2)):
        device = FakeDevice(tmp_path / f"{status}-{percent}", battery=(status, percent))
        result = Agent(ScriptedEngine([answer_turn("3.11")]), tools, pace=pace(device)).run(QUESTION)
        assert result.termination == "answered", (status, percent)


def test_unreadable_sensor_files_are_said_once_and_the_session_goes_on(tools, tmp_path):
    """A ``temp`` that is a folder, one that holds garbage and a battery capacity that is no number: each is one
    ``sensor_problem`` event naming the file and why, said once over every turn; the other readings still pace (the
    battery zone is read) and the session answers."""
    device = FakeDevice(tmp_path / "phone")
    zone0_temp = device.thermal / "thermal_zone0" / "temp"
    zone0_temp.unlink()
    zone0_temp.mkdir()  # a folder where a file is expected (chmod 000 does not stop root)
    (device.thermal / "thermal_zone1" / "temp").write_text("hot\n")
    (device.supplies / "battery" / "capacity").write_text("\x00\xff")
    engine = ScriptedEngine([*SEARCHES, answer_turn("Python 3.11")], n_threads=4)
    journal = tmp_path / "t.jsonl"
    events = drive(Agent(engine, tools, trajectory_path=journal, pace=pace(device)).events(QUESTION),
                   lambda event: None)
    assert events[-1].result.termination == "answered"
    problems = paced(events)
    assert {event.action for event in problems} == {"sensor_problem"} and {event.turn for event in problems} == {0}
    details = [event.detail for event in problems]
    assert len(details) == 3, details
    assert f"temperature of cpu-thermal: {zone0_temp} is a directory, not a file" in details[0]
    assert f"{device.thermal / 'thermal_zone1' / 'temp'} holds 'hot', not a whole number" in details[1]
    assert "battery battery:" in details[2] and "capacity" in details[2]
    assert all(detail.endswith("pacing goes on without that reading") for detail in details)
    [trajectory] = read_journal(journal).trajectories
    assert len(trajectory.paces) == 3 and trajectory.termination == "answered"


def test_a_device_without_thermal_zones_says_so_once_and_is_paced_by_its_battery(tools, tmp_path):
    root = tmp_path / "phone"
    (root / "sys" / "class" / "power_supply" / "BAT0").mkdir(parents=True)
    battery = root / "sys" / "class" / "power_supply" / "BAT0"
    (battery / "type").write_text("Battery\n")
    (battery / "status").write_text("Discharging\n")
    (battery / "capacity").write_text("50\n")
    engine = ScriptedEngine([*SEARCHES, answer_turn("Python 3.11")])

    def drain(event: Event) -> None:
        if isinstance(event, TurnCompleted) and event.turn == 1:
            (battery / "capacity").write_text("4\n")

    events = drive(Agent(engine, tools, pace=PaceConfig(root=root)).events(QUESTION), drain)
    assert [(event.turn, event.action) for event in paced(events)] == [(0, "sensor_problem"), (2, "battery_stop")]
    assert f"no thermal zones ({root / 'sys' / 'class' / 'thermal'} is missing)" in paced(events)[0].detail
    assert isinstance(events[-1], SessionFinished) and events[-1].result.termination == BATTERY_LOW


def test_read_sensors_reads_zones_and_supplies_and_names_what_it_cannot_read(tmp_path):
    device = FakeDevice(tmp_path / "phone", cpu_c=48.5, battery=("Discharging", 64))
    (device.thermal / "thermal_zone2").mkdir()
    (device.thermal / "thermal_zone2" / "type").write_text("cpu-thermal\n")
    (device.thermal / "thermal_zone2" / "temp").write_text("51000\n")
    (device.supplies / "usb").mkdir()  # a supply without its type file
    readings = read_sensors(device.root)
    assert [(zone.name, zone.celsius) for zone in readings.zones] == [
        ("cpu-thermal", 48.5), ("battery", 31.0), ("cpu-thermal (thermal_zone2)", 51.0)]
    assert readings.hottest is not None and readings.hottest.celsius == 51.0
    battery = readings.battery
    assert battery is not None and (battery.name, battery.status, battery.capacity_pct) == ("battery", "Discharging",
                                                                                            64)
    assert battery.discharging and [supply.kind for supply in readings.supplies] == ["Mains", "Battery"]
    assert readings.problems == (f"power supply usb: {device.supplies / 'usb' / 'type'} is missing",)
    (device.supplies / "battery" / "capacity").write_text("250\n")
    assert read_sensors(device.root).battery.capacity_pct is None  # type: ignore[union-attr]
    desktop = read_sensors(tmp_path / "empty")
    assert desktop.zones == () and desktop.supplies == () and desktop.battery is None
    assert desktop.problems == (f"temperatures: no thermal zones ({tmp_path / 'empty' / 'sys' / 'class' / 'thermal'} "
                                "is missing)",)


@pytest.mark.parametrize(("settings", "message"), [
    ({"resume_temp_c": 70.0, "max_temp_c": 70.0}, "resume_temp_c (70 C) must be below max_temp_c (70 C)"),
    ({"max_temp_c": 90.0, "pause_temp_c": 85.0}, "max_temp_c at most pause_temp_c (85 C)"),
    ({"battery_floor_pct": 101}, "battery_floor_pct is a percent from 0 to 100, got 101"),
    ({"min_threads": 0}, "min_threads must be at least 1, got 0"),
    ({"poll_s": 0.0}, "poll_s must be a finite number of seconds above 0, got 0.0"),
    ({"max_pause_s": float("inf")}, "max_pause_s must be a finite number of seconds, at least 0, got inf"),
])
def test_pace_settings_that_do_not_fit_are_refused_naming_them(settings, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PaceConfig(**settings)


def test_cli_pace_settings_need_pace_and_name_their_flags(docs_corpus, tmp_path, capsys):
    common = ["research", QUESTION, "--corpus", str(docs_corpus)]
    with pytest.raises(SystemExit) as exit_info:
        main([*common, "--pace-max-temp", "60"])
    assert exit_info.value.code == 2 and "--pace-max-temp goes with --pace" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([*common, "--pace", "--pace-resume-temp", "80"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "--pace: --pace-resume-temp (80 C) must be below --pace-max-temp (75 C)" in err, err
    with pytest.raises(SystemExit) as exit_info:
        main([*common, "--pace", "--pace-root", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2 and "--pace-root" in capsys.readouterr().err


def test_cli_pace_stops_on_a_low_battery_and_the_resumed_session_slows_down_when_hot(smollm2_gguf, docs_corpus,
                                                                                     tmp_path, capsys,
                                                                                     real_model_run):
    """``research --pace --pace-root`` with the real model: a draining battery stops the session before its first
    turn (exit 1, the stop on stderr with the resume command); plugged in and hot, ``--resume`` halves the threads
    and ends the session with an end record, whatever the model writes."""
    device = FakeDevice(tmp_path / "phone", cpu_c=50.0, battery=("Discharging", 5))
    journal = tmp_path / "t.jsonl"
    model = ["--model", str(smollm2_gguf), "--corpus", str(docs_corpus), *real_model_run.cli_args(), "--threads", "2",
             "--pace", "--pace-root", str(device.root)]
    code = main(["research", QUESTION, *model, "--out", str(journal), "--max-turns", "1", "--max-tokens", "48"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert "~ pacing (battery stop): battery battery at 5% and discharging, below the 15% floor" in captured.err
    assert f"resume with: venus-edge research --resume {journal}" in captured.err
    assert captured.out.startswith("Stopped: battery low (resumable) (termination 'battery_low').")
    [trajectory] = read_journal(journal).trajectories
    assert trajectory.termination == "incomplete" and trajectory.turns == []

    device.battery("Charging", 6)
    device.cpu(76.0)  # above the default 75 C: halve the threads
    code = main(["research", "--resume", str(journal), *model, "--json"])
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    assert "~ pacing (threads lowered): cpu-thermal at 76.0 C, at or above 75 C: threads 2 -> 1" in captured.err
    assert json.loads(captured.out)["termination"] != BATTERY_LOW
    [whole] = read_journal(journal).trajectories
    assert whole.end and [(r["action"], r["n_threads"]) for r in whole.paces] == [("battery_stop", 2),
                                                                                 ("threads_lowered", 1)]


def test_llama_cpp_engine_changes_its_threads_between_calls(smollm2_engine):
    """``set_threads`` sets llama.cpp's own counts on the agent's context and visit's helper context; decoding goes
    on; a count llama.cpp cannot take is refused."""
    engine = smollm2_engine
    before = engine.n_threads
    try:
        engine.complete([{"role": "user", "content": "Hi"}], max_tokens=2)  # the helper context exists now
        engine.set_threads(1)
        contexts = [engine._llm._ctx.ctx, engine._helper.llm._ctx.ctx]
        assert [(llama_cpp.llama_n_threads(c), llama_cpp.llama_n_threads_batch(c)) for c in contexts] == [(1, 1)] * 2
        assert engine.model_info()["n_threads"] == 1
        assert engine.complete([{"role": "user", "content": "Hi"}], max_tokens=2) is not None
        with pytest.raises(ValueError, match="n_threads must be from 1 to"):
            engine.set_threads(0)
    finally:
        engine.set_threads(before)
    assert llama_cpp.llama_n_threads(engine._llm._ctx.ctx) == before


def test_sessions_that_share_an_engine_give_back_threads_another_one_took(tools, tmp_path):
    """A server's sessions share its engine: threads the first session took away when hot are given back by the
    next one once the device has cooled (up to the engine's threads when pacing first saw it), not kept low."""
    device = FakeDevice(tmp_path / "phone")
    engine = ScriptedEngine([SEARCHES[0], answer_turn("Python 3.11"), SEARCHES[1], answer_turn("Python 3.11")],
                            n_threads=4)
    agent = Agent(engine, tools, pace=pace(device))

    def heat_after_first_turn(event: Event) -> None:
        if isinstance(event, TurnCompleted) and event.turn == 0:
            device.cpu(72.0)

    first = paced(drive(agent.events(QUESTION), heat_after_first_turn))
    assert [(e.action, e.n_threads) for e in first] == [("threads_lowered", 2)] and engine.n_threads == 2
    device.cpu(55.0)
    second = paced(drive(agent.events(QUESTION), lambda event: None))
    assert [(e.turn, e.action, e.n_threads) for e in second] == [(0, "threads_raised", 4)]
    assert engine.thread_changes == [2, 4]


def test_the_server_paces_its_sessions_and_stops_one_on_a_low_battery(tools, tmp_path):
    """``ResearchService(pace=)`` (``serve --pace``): a hot device lowers the threads in a session's events and
    journal; a discharging battery below the floor ends the next session ``battery_low``, resumable."""
    from venus_edge.server.service import ResearchService, SessionRequest

    device = FakeDevice(tmp_path / "phone", cpu_c=72.0)
    engine = ScriptedEngine([SEARCHES[0], answer_turn("Python 3.11")], n_threads=4)
    journal = tmp_path / "served.jsonl"
    service = ResearchService([engine], tools, AgentConfig(), journal_path=journal, pace=pace(device))
    try:
        hot = service.submit(SessionRequest(QUESTION))
        assert hot.wait(60)
        device.battery("Discharging", 9)
        drained = service.submit(SessionRequest(QUESTION))
        assert drained.wait(60)
    finally:
        service.close()
    assert hot.result is not None and hot.result.termination == "answered"
    assert [(e["turn"], e["action"], e["n_threads"]) for e in hot.events if e["type"] == "pace"] == \
        [(0, "threads_lowered", 2), (1, "threads_lowered", 1)]  # still 72 C before the second turn
    assert drained.result is not None and drained.result.termination == BATTERY_LOW
    assert [e["action"] for e in drained.events if e["type"] == "pace"] == ["battery_stop"]
    by_id = {t.session_id: t for t in read_journal(journal).trajectories}
    assert [p["n_threads"] for p in by_id[hot.session_id].paces] == [2, 1]
    assert by_id[drained.session_id].termination == "incomplete", "no end record: the journal resumes it"


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_serve_and_mcp_take_pace_and_refuse_its_settings_without_it(docs_corpus, capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--corpus", str(docs_corpus), "--pace-battery-floor", "20"])
    assert exit_info.value.code == 2 and "--pace-battery-floor goes with --pace" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--corpus", str(docs_corpus), "--pace", "--pace-max-temp", "90"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "(90 C), and --pace-max-temp at most --pace-pause-temp" in err, err


def test_mcp_progress_and_the_chat_stream_say_what_pacing_did(tools, tmp_path):
    """An MCP client's progress notifications and an OpenAI chat client's reasoning text name each pacing action,
    so a client waiting through a pause is told why."""
    from venus_edge.server.app import _progress_text
    from venus_edge.server.mcp import _Progress

    device = FakeDevice(tmp_path / "phone", cpu_c=72.0)
    engine = ScriptedEngine([SEARCHES[0], answer_turn("Python 3.11")], n_threads=4)
    events = [event.to_dict() for event in Agent(engine, tools, pace=pace(device)).events(QUESTION)]
    lowered = next(event for event in events if event["type"] == "pace")
    progress = _Progress(10)
    messages = [update[2] for event in events if (update := progress.of(event)) is not None]
    assert f"turn 1: pacing (threads lowered): {lowered['detail']}" in messages, messages
    assert f"\n[pacing (threads lowered): {lowered['detail']}]\n" in "".join(_progress_text(e) for e in events)
