"""The research server, started for real (uvicorn on 127.0.0.1) and driven over HTTP: SSE order, a session on a
real model, cancellation and client disconnect, queue overflow, auth, body limits, the OpenAI client."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
import openai
import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.cli import main
from venus_edge.server import QueueFullError, ResearchService, SessionRequest, create_app
from venus_edge.server.app import LOOPBACK_HOSTS
from venus_edge.server.defaults import is_loopback
from venus_edge.testing import ScriptedEngine, UvicornThread, answer_turn, read_sse, tool_call_turn
from venus_edge.toolbox import close_tools, default_tools
from venus_edge.trajectory import read_journal

if TYPE_CHECKING:
    from conftest import RealModelRun

SLOW_ANSWER = answer_turn("y" * 2_000)  # 250 pieces of 8 characters, 10 ms each: 2.5 s of "decoding"
# Cut at a turn's max_tokens (15,000 characters here): ~19 s of "decoding", for sessions the test itself ends, so that
# "still running" holds however slowly the machine answers the test's requests.
LONG_ANSWER = answer_turn("y" * 20_000)


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal.jsonl"


@pytest.fixture(scope="module")
def corpus_tools(docs_corpus: Path) -> Iterator[list[Any]]:
    tools = default_tools([docs_corpus], completer=None)
    yield tools
    close_tools(tools)


def serve(engine: ScriptedEngine, journal: Path, tools: list[Any] | None = None, *, config: AgentConfig | None = None,
          max_queue: int = 8, **app_args: Any) -> tuple[ResearchService, UvicornThread]:
    service = ResearchService([engine], tools or [], config or AgentConfig(), journal_path=journal,
                              max_queue=max_queue)
    return service, UvicornThread(create_app(service, **app_args))


def first_corpus_url(tools: list[Any]) -> str:
    search = next(tool for tool in tools if tool.name == "search")
    (results,) = json.loads(search({"query": ["dataclasses field default"]}).text)
    return str(results["web_page_info_list"][0]["url"])


def test_events_stream_in_order_with_ids_and_end_with_the_result(journal: Path, corpus_tools: list[Any]) -> None:
    url = first_corpus_url(corpus_tools)
    engine = ScriptedEngine([tool_call_turn("search", query=["dataclasses field"]),
                             tool_call_turn("visit", url=[url], goal="what a field is"),
                             answer_turn(f"A field, see {url} and https://example.org/never-read")], piece_chars=16)
    service, server = serve(engine, journal, corpus_tools)
    with server, httpx.stream("POST", f"{server.url}/v1/research", json={"question": "What is a field?"},
                              timeout=30) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        messages = list(read_sse(response))
    service.close()
    kinds = [kind for kind, _, _ in messages]
    assert [int(index) for _, index, _ in messages] == list(range(len(messages)))
    assert all(data["type"] == kind for kind, _, data in messages)
    assert kinds[0] == "session_started" and kinds[-1] == "session_finished"
    flow = [k for k in kinds if k in ("turn_started", "turn_completed", "tool_called", "tool_returned")]
    assert flow == ["turn_started", "tool_called", "tool_returned", "turn_completed"] * 2 + \
        ["turn_started", "turn_completed"]  # a tool turn is recorded with its result
    assert kinds.index("text") > kinds.index("turn_started")
    result = messages[-1][2]
    assert result["termination"] == "answered" and result["answer"].startswith("A field")
    assert result["sources"] == [url] and result["unvisited_citations"] == ["https://example.org/never-read"]
    (trajectory,) = read_journal(journal).trajectories
    assert trajectory.session_id == result["session_id"] == messages[0][2]["session_id"]


def test_a_late_listener_replays_from_last_event_id_and_reads_the_session_back(journal: Path) -> None:
    service, server = serve(ScriptedEngine([answer_turn("42")], piece_chars=4), journal)
    with server:
        started = httpx.post(f"{server.url}/v1/research", json={"question": "q", "stream": False})
        assert started.status_code == 202
        links = started.json()
        service.get(links["session_id"]).wait(10)
        with httpx.stream("GET", server.url + links["events_url"], headers={"Last-Event-ID": "2"}) as response:
            replay = list(read_sse(response))
        view = httpx.get(server.url + links["session_url"]).json()
        listed = httpx.get(f"{server.url}/v1/sessions").json()["sessions"]
        missing = httpx.get(f"{server.url}/v1/sessions/{'0' * 32}")
    service.close()
    assert replay[0][1] == "3" and replay[-1][0] == "session_finished"
    assert view["state"] == "finished" and view["answer"] == "42" and view["turns"][0]["kind"] == "answer"
    assert [s["session_id"] for s in listed] == [links["session_id"]]
    assert missing.status_code == 404 and "no session" in missing.json()["error"]["message"]


def test_delete_cancels_a_running_session_within_its_turn(journal: Path) -> None:
    engine = ScriptedEngine([SLOW_ANSWER], piece_chars=8, delay_s=0.01)
    service, server = serve(engine, journal)
    with server, httpx.stream("POST", f"{server.url}/v1/research", json={"question": "q"}) as response:
        kinds = []
        for kind, _, data in read_sse(response):  # noqa: B007  # the last event's data is read below
            kinds.append(kind)
            if kind == "text" and kinds.count("text") == 3:
                session_id = response.headers["x-session-id"]
                assert httpx.delete(f"{server.url}/v1/sessions/{session_id}").status_code == 202
        again = httpx.delete(f"{server.url}/v1/sessions/{session_id}")
    service.close()
    assert kinds[-1] == "session_finished" and data["termination"] == "cancelled"
    assert engine.pieces_streamed < 50  # of 250: the decode stopped within the turn
    assert again.status_code == 409
    (trajectory,) = read_journal(journal).trajectories
    assert trajectory.termination == "cancelled"


def test_a_client_that_disconnects_cancels_its_session(journal: Path) -> None:
    engine = ScriptedEngine([SLOW_ANSWER], piece_chars=8, delay_s=0.01)
    service, server = serve(engine, journal)
    with server:
        with httpx.stream("POST", f"{server.url}/v1/research", json={"question": "q"}) as response:
            session_id = response.headers["x-session-id"]
            for kind, _, _ in read_sse(response):
                if kind == "text":
                    break
        handle = service.get(session_id)
        assert handle is not None and handle.wait(10)
    service.close()
    assert handle.result is not None and handle.result.termination == "cancelled"
    assert engine.pieces_streamed < 100


def test_a_full_queue_answers_429_with_retry_after_and_a_queued_session_can_be_cancelled(journal: Path) -> None:
    engine = ScriptedEngine(lambda prompt: LONG_ANSWER, piece_chars=8, delay_s=0.01)
    service, server = serve(engine, journal, max_queue=1)
    with server:
        running = httpx.post(f"{server.url}/v1/research", json={"question": "one", "stream": False}).json()
        deadline = time.monotonic() + 10
        while not engine.prompts and time.monotonic() < deadline:  # "one" is decoding
            time.sleep(0.01)
        queued = httpx.post(f"{server.url}/v1/research", json={"question": "two", "stream": False}).json()
        refused = httpx.post(f"{server.url}/v1/research", json={"question": "three", "stream": False})
        health = httpx.get(f"{server.url}/health").json()
        assert httpx.delete(f"{server.url}/v1/sessions/{queued['session_id']}").status_code == 202
        httpx.delete(f"{server.url}/v1/sessions/{running['session_id']}")
    service.close()
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert "waiting" in refused.json()["error"]["message"]
    assert health["queue"] == {"waiting": 1, "running": 1, "max_queue": 1, "workers": 1}
    assert service.get(queued["session_id"]).result.termination == "cancelled"  # type: ignore[union-attr]
    assert len(engine.prompts) == 1  # the queued session never reached the model


def test_every_route_needs_the_key_except_the_page(journal: Path) -> None:
    service, server = serve(ScriptedEngine(lambda prompt: answer_turn("ok")), journal, api_key="s3cret")
    with server:
        bare = httpx.get(f"{server.url}/v1/models")
        wrong = httpx.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer nope"})
        research = httpx.post(f"{server.url}/v1/research", json={"question": "q"})
        metrics = httpx.get(f"{server.url}/metrics")
        right = httpx.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer s3cret"})
        cookie = httpx.get(f"{server.url}/health", cookies={"venus_edge_key": "s3cret"})
        page = httpx.get(f"{server.url}/")
    service.close()
    for refused in (bare, wrong, research, metrics):
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert research.json()["error"]["type"] == "authentication_error"
    assert right.status_code == 200 and right.json()["data"][0]["id"] == "scripted"
    assert cookie.status_code == 200 and page.status_code == 200 and page.text.lower().startswith("<!doctype html")
    assert service.counters["submitted"] == 0


def test_oversized_bodies_and_questions_are_refused(journal: Path) -> None:
    service, server = serve(ScriptedEngine(lambda prompt: answer_turn("ok")), journal, max_body_bytes=2_000)
    service.max_question_chars = 500
    big = json.dumps({"question": "x" * 5_000}).encode()

    def chunked() -> Iterator[bytes]:
        for start in range(0, len(big), 1_000):
            yield big[start: start + 1_000]

    with server:
        declared = httpx.post(f"{server.url}/v1/research", content=big, headers={"Content-Type": "application/json"})
        streamed = httpx.post(f"{server.url}/v1/research", content=chunked(),
                              headers={"Content-Type": "application/json"})
        long_question = httpx.post(f"{server.url}/v1/research", json={"question": "x" * 600})
        empty = httpx.post(f"{server.url}/v1/research", json={"question": "  "})
        bad_limit = httpx.post(f"{server.url}/v1/research", json={"question": "q", "max_turns": 0})
        unknown = httpx.post(f"{server.url}/v1/research", json={"question": "q", "shell": "rm"})
    service.close()
    assert declared.status_code == 413 and streamed.status_code == 413
    assert "2,000 bytes" in declared.json()["error"]["message"]
    assert long_question.status_code == 413 and "at most 500" in long_question.json()["error"]["message"]
    assert empty.status_code == 422 and "empty" in empty.json()["error"]["message"]
    assert bad_limit.status_code == 422 and "max_turns" in bad_limit.json()["error"]["message"]
    assert unknown.status_code == 422 and "shell" in unknown.json()["error"]["message"]
    assert service.counters["submitted"] == 0


def test_request_limits_are_lowered_to_the_servers_never_raised(journal: Path) -> None:
    config = AgentConfig(max_turns=20, time_limit_s=600)
    service = ResearchService([ScriptedEngine([])], [], config, journal_path=journal)
    try:
        lowered = service.limit(SessionRequest("q", max_turns=5, time_limit_s=60, max_tokens=100))
        capped = service.limit(SessionRequest("q", max_turns=500, time_limit_s=60_000, max_tokens=10**9))
    finally:
        service.close()
    assert (lowered.max_turns, lowered.time_limit_s, lowered.sampling.max_tokens) == (5, 60, 100)
    assert (capped.max_turns, capped.time_limit_s, capped.sampling.max_tokens) == (20, 600, 15_000)


def test_the_openai_client_streams_reasoning_then_the_answer_with_sources(journal: Path,
                                                                         corpus_tools: list[Any]) -> None:
    url = first_corpus_url(corpus_tools)
    engine = ScriptedEngine([tool_call_turn("visit", url=[url], goal="g"), answer_turn("It is a field.")],
                            piece_chars=6)
    service, server = serve(engine, journal, corpus_tools, api_key="k")
    with server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0)
        models = [model.id for model in client.models.list()]
        stream = client.chat.completions.create(
            model=models[0], stream=True,
            messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is a field?"}])
        reasoning, content, finish = [], [], None
        for chunk in stream:
            delta = chunk.choices[0].delta
            reasoning.append(getattr(delta, "reasoning_content", None) or "")
            content.append(delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        engine.turns = [answer_turn("plain")]
        whole = client.chat.completions.create(model=models[0], messages=[{"role": "user", "content": "again?"}])
        with pytest.raises(openai.UnprocessableEntityError):
            client.chat.completions.create(model=models[0], messages=[{"role": "system", "content": "no question"}])
    service.close()
    assert models == ["scripted"]
    progress = "".join(reasoning)
    assert "[visit]" in progress and url in progress and "It is a field." in progress
    answer = "".join(content)
    assert answer.startswith("It is a field.") and f"Sources:\n1. {url}" in answer and finish == "stop"
    assert whole.choices[0].message.content == "plain" and whole.usage is not None and whole.usage.total_tokens > 0
    assert len(read_journal(journal).trajectories) == 2


def test_metrics_count_sessions_tokens_and_prefill_reuse(journal: Path) -> None:
    service, server = serve(ScriptedEngine(lambda prompt: answer_turn("ok")), journal)
    with server:
        for _ in range(2):
            httpx.post(f"{server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "q"}]})
        text = httpx.get(f"{server.url}/metrics").text
    service.close()
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and line[0] != "#"}
    assert values['venus_edge_sessions_finished_total{termination="answered"}'] == 2
    assert values["venus_edge_sessions_submitted_total"] == 2 and values["venus_edge_turns_total"] == 2
    assert values["venus_edge_tokens_decoded_total"] > 0 and values['venus_edge_sessions{state="waiting"}'] == 0
    assert "venus_edge_prefill_reuse_ratio" in values and "venus_edge_decode_tokens_per_second" in values


def test_serve_refuses_a_public_address_without_a_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--host", "0.0.0.0", "--model", "/nonexistent.gguf"])
    assert exited.value.code == 2
    assert "give --server-api-key KEY" in capsys.readouterr().err  # the key flag was --api-key before 0.2


def _start_serve(command: list[str]) -> tuple[subprocess.Popen[str], str]:
    """``venus-edge serve`` (``--port 0``) started as a user starts it; the process and its base URL once it answers
    (the port is read from its banner: a guessed free port could be taken meanwhile). A process that does not come
    up is killed."""
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        banner = process.stderr.readline()  # type: ignore[union-attr]
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", banner)
        assert "venus-edge serve:" in banner and found, banner
        base = f"http://127.0.0.1:{found.group(1)}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    return process, base
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.2)
    except BaseException:
        process.kill()
        process.wait(30)
        raise


def test_serve_runs_a_strict_session_on_a_real_model(tmp_path: Path, smollm2_gguf: Path, docs_corpus: Path,
                                                     real_model_run: RealModelRun) -> None:
    """`venus-edge serve` as a user starts it: SmolLM2 with the protocol grammar, a docs corpus, one session. With
    1,200 new tokens a turn no strict turn is cut (tests/test_research.py), so every turn is well formed."""
    journal = tmp_path / "served.jsonl"
    command = [sys.executable, "-m", "venus_edge.cli", "serve", "--model", str(smollm2_gguf), "--corpus",
               str(docs_corpus), "--strict", "--extractive-visit", "--max-turns", "2", "--n-ctx", "4096",
               "--max-tokens", "1200", "--threads", "2", "--no-prompt-cache", "--port", "0", "--journal",
               str(journal), *real_model_run.cli_args()]
    process, base = _start_serve(command)
    try:
        with httpx.stream("POST", f"{base}/v1/research", json={"question": "What does dataclasses.field do?"},
                          timeout=300) as response:
            messages = list(read_sse(response))
        view = httpx.get(f"{base}/v1/sessions/{messages[-1][2]['session_id']}").json()
    finally:
        process.terminate()
        process.wait(30)
    kinds = [kind for kind, _, _ in messages]
    assert kinds[0] == "session_started" and kinds[-1] == "session_finished" and "text" in kinds
    completed = [data for kind, _, data in messages if kind == "turn_completed"]
    assert completed and all(turn["kind"] in ("tool_call", "answer") for turn in completed)  # strict: well formed
    assert view["state"] == "finished" and len(view["turns"]) == len(completed)
    (trajectory,) = read_journal(journal).trajectories
    assert trajectory.termination == messages[-1][2]["termination"]


def test_ctrl_c_on_serve_interrupts_a_running_session_which_then_resumes(tmp_path: Path, smollm2_gguf: Path,
                                                                          docs_corpus: Path,
                                                                          real_model_run: RealModelRun) -> None:
    """Ctrl-C on `serve` while a session decodes: its client's stream ends with `session_finished`, termination
    `interrupted`, the server exits at once, and the journal keeps the session open, so that `research --resume`
    goes on with it. (It used to write `cancelled`, which cannot be resumed, after uvicorn had waited for the
    stream, and the client's stream ended without `session_finished`.)"""
    import signal

    from venus_edge.agent import resumable_session

    journal = tmp_path / "served.jsonl"
    process, base = _start_serve([
        sys.executable, "-m", "venus_edge.cli", "serve", "--model", str(smollm2_gguf), "--corpus", str(docs_corpus),
        "--max-turns", "2", "--n-ctx", "4096", "--max-tokens", "3000", "--threads", "2", "--no-prompt-cache",
        "--port", "0", "--journal", str(journal), *real_model_run.cli_args()])
    messages: list[tuple[str, str, Any]] = []
    try:
        with httpx.stream("POST", f"{base}/v1/research", timeout=300,
                          json={"question": "Write out, in full, every function of the os module."}) as response:
            for message in read_sse(response):
                messages.append(message)
                if message[0] == "text" and not any(kind == "text" for kind, _, _ in messages[:-1]):
                    process.send_signal(signal.SIGINT)  # the first turn is decoding
        code = process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    kinds = [kind for kind, _, _ in messages]
    assert kinds[-1] == "session_finished" and messages[-1][2]["termination"] == "interrupted", kinds[-3:]
    assert code == 130 and "stopped; a session that was running is kept in the journal" in \
        process.stderr.read()  # type: ignore[union-attr]
    session_id = messages[-1][2]["session_id"]
    (trajectory,) = read_journal(journal).trajectories
    assert trajectory.session_id == session_id and trajectory.termination == "incomplete"
    assert resumable_session(journal).session_id == session_id


@pytest.mark.parametrize("route", ["/v1/research", "/v1/chat/completions"])
def test_a_body_that_is_not_utf8_is_refused_saying_so(journal: Path, route: str) -> None:
    """Raw Latin-1 bytes in a JSON body got FastAPI's "There was an error parsing the body"; the answer says what is
    wrong and how to send it. Nothing starts."""
    service, server = serve(ScriptedEngine([answer_turn("42")]), journal)
    body = (b'{"question": "caf\xe9?"}' if route == "/v1/research" else
            b'{"messages": [{"role": "user", "content": "caf\xe9?"}]}')
    with server:
        refused = httpx.post(server.url + route, content=body, headers={"Content-Type": "application/json"})
        listed = httpx.get(f"{server.url}/v1/sessions")
    service.close()
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    where = body.index(bytes([0xE9]))
    assert message.startswith(f"the request body is not UTF-8 (byte {where})") and "RFC 8259" in message
    assert listed.json()["sessions"] == []


def test_many_sessions_share_the_journal_without_mixing_records(journal: Path) -> None:
    engine = ScriptedEngine(lambda prompt: answer_turn(prompt.rsplit("Q", 1)[-1][:3]), piece_chars=2)
    service, server = serve(engine, journal, max_queue=32)
    answers: dict[str, str] = {}

    def ask(n: int) -> None:
        reply = httpx.post(f"{server.url}/v1/chat/completions", timeout=60,
                           json={"messages": [{"role": "user", "content": f"Q{n:03d}"}]}).json()
        answers[f"{n:03d}"] = reply["choices"][0]["message"]["content"]

    with server:
        threads = [threading.Thread(target=ask, args=(n,)) for n in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    service.close()
    assert all(answer == number for number, answer in answers.items()) and len(answers) == 12
    trajectories = read_journal(journal).trajectories
    assert sorted(t.question for t in trajectories) == [f"Q{n:03d}" for n in range(12)]
    assert all(t.answer == t.question[1:] for t in trajectories)


def test_a_key_with_any_characters_travels_in_the_pages_cookie(journal: Path) -> None:
    key = 'a b;c,"d\\é'
    service, server = serve(ScriptedEngine(lambda prompt: answer_turn("ok")), journal, api_key=key)
    with server:
        encoded = httpx.get(f"{server.url}/health", headers={"Cookie": f"venus_edge_key={quote(key)}"})
        raw_prefix = httpx.get(f"{server.url}/health", headers={"Cookie": "venus_edge_key=a"})
        bearer = httpx.get(f"{server.url}/health", headers={"Authorization": f"Bearer {quote(key)}"})
    service.close()
    assert encoded.status_code == 200 and raw_prefix.status_code == 401
    assert bearer.status_code == 401  # a bearer token is compared as sent


def test_a_loopback_server_answers_only_loopback_host_names(journal: Path) -> None:
    service, server = serve(ScriptedEngine([]), journal, allowed_hosts=LOOPBACK_HOSTS)
    with server:
        rebound = httpx.get(f"{server.url}/v1/sessions", headers={"Host": "attacker.example"})
        local = httpx.get(f"{server.url}/v1/sessions", headers={"Host": f"localhost:{server.port}"})
        page = httpx.get(f"{server.url}/")
    service.close()
    assert rebound.status_code == 400 and local.status_code == 200
    assert page.headers["content-security-policy"] == "frame-ancestors 'none'"
    assert page.headers["x-content-type-options"] == "nosniff"


def test_a_session_a_killed_server_left_is_listed_as_incomplete(journal: Path) -> None:
    stream = Agent(ScriptedEngine([SLOW_ANSWER], piece_chars=8), [], trajectory_path=journal).events("old question")
    next(stream)  # session_started: the start record is in the journal; then the "server" dies
    stream.close()
    service, server = serve(ScriptedEngine([]), journal)
    with server:
        (listed,) = httpx.get(f"{server.url}/v1/sessions").json()["sessions"]
        view = httpx.get(f"{server.url}/v1/sessions/{listed['session_id']}").json()
    service.close()
    assert listed["state"] == view["state"] == "incomplete" and listed["question"] == "old question"


def test_sessions_decode_side_by_side_when_there_are_several_engines(journal: Path) -> None:
    """``--slots N``: one worker per engine (the sequences of a batched engine); sessions past them wait."""
    engines = [ScriptedEngine(lambda prompt: LONG_ANSWER, piece_chars=8, delay_s=0.01) for _ in range(2)]
    service = ResearchService(engines, [], AgentConfig(), journal_path=journal, max_queue=4)
    handles = [service.submit(SessionRequest(f"q{n}")) for n in range(3)]
    deadline = time.monotonic() + 10
    # Both engines decoding (a worker counts as running a moment before its engine sees the prompt).
    while not all(engine.prompts for engine in engines) and time.monotonic() < deadline:
        time.sleep(0.01)
    states = sorted(handle.state for handle in handles)
    for handle in handles:
        service.cancel(handle.session_id)
    service.close()
    assert all(engine.prompts for engine in engines)
    assert states == ["queued", "running", "running"]


def test_closing_interrupts_running_sessions_but_one_its_client_cancelled_stays_cancelled(journal: Path) -> None:
    """``close`` (a server stopping) interrupts: no end record, resumable. A session whose client had cancelled it
    just before (DELETE, a client that left) is the client's word: cancelled, even while it is still decoding."""
    engines = [ScriptedEngine(lambda prompt: LONG_ANSWER, piece_chars=8, delay_s=0.01) for _ in range(2)]
    service = ResearchService(engines, [], AgentConfig(), journal_path=journal, max_queue=4)
    kept, dropped = service.submit(SessionRequest("keep")), service.submit(SessionRequest("drop"))
    deadline = time.monotonic() + 10
    while not all(engine.prompts for engine in engines) and time.monotonic() < deadline:
        time.sleep(0.01)
    service.cancel(dropped.session_id)
    service.close()
    assert kept.wait(30) and dropped.wait(30)
    assert kept.result.termination == "interrupted"  # type: ignore[union-attr]
    assert dropped.result.termination == "cancelled"  # type: ignore[union-attr]
    by_question = {t.question: t.termination for t in read_journal(journal).trajectories}
    assert by_question == {"keep": "incomplete", "drop": "cancelled"}
    service.close()  # a second close returns at once


def test_a_burst_of_submits_never_queues_more_than_max_queue(journal: Path) -> None:
    engine = ScriptedEngine(lambda prompt: LONG_ANSWER, piece_chars=8, delay_s=0.01)
    service = ResearchService([engine], [], AgentConfig(), journal_path=journal, max_queue=1)
    accepted, refused = [], 0
    for n in range(10):  # faster than the worker wakes up
        try:
            accepted.append(service.submit(SessionRequest(f"q{n}")))
        except QueueFullError:
            refused += 1
    for handle in accepted:
        service.cancel(handle.session_id)
    service.close()
    assert len(accepted) == 2 and refused == 8  # one for the idle worker, one waiting


def test_a_client_that_leaves_while_queued_frees_its_place_at_once(journal: Path) -> None:
    engine = ScriptedEngine(lambda prompt: LONG_ANSWER, piece_chars=8, delay_s=0.01)
    service, server = serve(engine, journal, max_queue=1)
    with server:
        running = httpx.post(f"{server.url}/v1/research", json={"question": "one", "stream": False}).json()
        with httpx.stream("POST", f"{server.url}/v1/research", json={"question": "two"}) as response:
            queued_id = response.headers["x-session-id"]
            assert service.get(queued_id).state == "queued"  # type: ignore[union-attr]
        deadline = time.monotonic() + 10  # the client left while "two" waited
        while service.waiting and time.monotonic() < deadline:
            time.sleep(0.02)
        third = httpx.post(f"{server.url}/v1/research", json={"question": "three", "stream": False})
        listed = {s["session_id"]: s for s in httpx.get(f"{server.url}/v1/sessions").json()["sessions"]}
        httpx.delete(f"{server.url}/v1/sessions/{running['session_id']}")
        third_id = third.json().get("session_id", "")
        deadline = time.monotonic() + 30  # "three" starts once "one" has gone (a busy machine takes its time)
        while getattr(service.get(third_id), "state", None) == "queued" and time.monotonic() < deadline:
            time.sleep(0.02)
        httpx.delete(f"{server.url}/v1/sessions/{third_id}")
    service.close()
    assert third.status_code == 202
    assert listed[queued_id]["termination"] == "cancelled" and listed[queued_id]["state"] == "finished"
    questions = [prompt.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>")[0] for prompt in engine.prompts]
    assert questions == ["one", "three"]  # "two" never reached the model; "three" did, after "one"


def test_a_chat_client_that_leaves_without_streaming_cancels_its_session(journal: Path) -> None:
    engine = ScriptedEngine(lambda prompt: LONG_ANSWER, piece_chars=8, delay_s=0.01)
    service, server = serve(engine, journal)
    with server:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/v1/chat/completions", timeout=0.5,
                       json={"messages": [{"role": "user", "content": "q"}]})
        deadline = time.monotonic() + 10  # a busy server may register the session after the client left
        while not service.sessions and time.monotonic() < deadline:
            time.sleep(0.02)
        (handle,) = service.sessions.values()
        assert handle.wait(10)
    service.close()
    assert handle.result is not None and handle.result.termination == "cancelled"
    assert engine.pieces_streamed < 1_000  # of 1,875: the decode stopped within the turn


def test_last_event_id_garbage_restarts_and_an_id_past_the_end_keeps_true_ids(journal: Path) -> None:
    engine = ScriptedEngine(lambda prompt: SLOW_ANSWER, piece_chars=8, delay_s=0.005)
    service, server = serve(engine, journal)
    with server:
        session_id = httpx.post(f"{server.url}/v1/research", json={"question": "q", "stream": False}).json()[
            "session_id"]
        ids = {}
        for last in ("60", "\u00b2", "9" * 5000, "-3"):  # "60" first: past the end of a live session
            with httpx.stream("GET", f"{server.url}/v1/sessions/{session_id}/events",
                              headers={"Last-Event-ID": last.encode("latin-1")}) as response:
                assert response.status_code == 200
                ids[last[:8]] = [(int(index), kind) for kind, index, _ in read_sse(response)]
    service.close()
    everything = ids["\u00b2"]
    assert [index for index, _ in everything] == list(range(len(everything)))
    assert ids["99999999"] == ids["-3"] == everything
    assert ids["60"] == everything[61:] and ids["60"][-1][1] == "session_finished"


def test_a_session_that_fails_to_start_ends_and_the_worker_goes_on(journal: Path) -> None:
    class FailsOnce(ScriptedEngine):
        failed = False

        def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
            if "ONCE" in text and not self.failed:
                self.failed = True
                raise ConnectionError("model server unreachable")
            return super().tokenize(text, parse_special=parse_special)

    service = ResearchService([FailsOnce(lambda prompt: answer_turn("ok"))], [], AgentConfig(), journal_path=journal)
    first = service.submit(SessionRequest("ONCE"))
    assert first.wait(10)
    second = service.submit(SessionRequest("again"))
    assert second.wait(10)
    service.close()
    assert first.result.termination == "error"  # type: ignore[union-attr]
    assert [e["type"] for e in first.events] == ["error", "session_finished"]
    assert second.result.termination == "answered" and service.running == 0  # type: ignore[union-attr]


def test_only_the_last_finished_sessions_stay_in_memory(journal: Path) -> None:
    service = ResearchService([ScriptedEngine(lambda prompt: answer_turn("ok"))], [], AgentConfig(),
                              journal_path=journal, keep_finished=3)
    handles = [service.submit(SessionRequest(f"q{n}")) for n in range(6)]
    for handle in handles:
        handle.wait(10)
    history = service.history()
    service.close()
    assert list(service.sessions) == [h.session_id for h in handles[3:]]
    assert len(history) == 6 and service.history() is history  # read once while the file is unchanged


def test_loopback_servers_answer_their_own_address_and_cors_covers_errors(journal: Path) -> None:
    from venus_edge.server.cli import _loopback_hosts

    assert "127.0.0.2" in _loopback_hosts("127.0.0.2") and "[::1]" in _loopback_hosts("::1")  # type: ignore[operator]
    assert _loopback_hosts("10.0.0.5") is None
    service, server = serve(ScriptedEngine([]), journal, api_key="k", cors_origins=["http://app.local"])
    with server:
        refused = httpx.get(f"{server.url}/v1/models", headers={"Origin": "http://app.local"})
    service.close()
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "http://app.local"


@pytest.mark.parametrize("route, body, last", [
    ("/v1/research", b'{"question": "why \\ud800 here?"}', "event: session_finished"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "why \\ud800 here?"}], "stream": true}',
     "data: [DONE]"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "why \\ud800 '
                             b'here?"}]}]}', '"content":"42"'),
])
def test_a_question_that_is_not_valid_unicode_is_stored_valid_and_every_reader_still_answers(
        journal: Path, route: str, body: bytes, last: str) -> None:
    """A lone surrogate is valid JSON (``"\\ud800"``): it used to kill the SSE stream with ``UnicodeEncodeError`` and
    poison the journal, so that ``/v1/sessions`` answered 500 for every client, also after a restart. The question is
    now stored, streamed and listed with U+FFFD in its place."""
    service, server = serve(ScriptedEngine([answer_turn("42")]), journal)
    with server:
        with httpx.stream("POST", server.url + route, content=body, headers={"Content-Type": "application/json"},
                          timeout=30) as response:
            assert response.status_code == 200
            response.read()  # to the end: the stream is whole
        text = response.text
        listed = httpx.get(f"{server.url}/v1/sessions")
        assert listed.status_code == 200, listed.text
        [summary] = listed.json()["sessions"]
        view = httpx.get(f"{server.url}/v1/sessions/{summary['session_id']}")
    service.close()
    assert last in text, text  # the stream ran to its end
    assert summary["question"] == "why \ufffd here?" and summary["termination"] == "answered"
    assert view.status_code == 200 and view.json()["question"] == "why \ufffd here?"
    journal.read_bytes().decode("utf-8")  # every byte UTF-8
    restarted, again = serve(ScriptedEngine([]), journal)  # a new server on the same journal
    with again:
        assert httpx.get(f"{again.url}/v1/sessions").json()["sessions"][0]["question"] == "why \ufffd here?"
    restarted.close()
