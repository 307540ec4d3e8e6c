"""The research server times out slow clients (issue 25, kind 5): a body promised and never sent gets 408 and its
connection is closed (``create_app(body_timeout_s=)``), and so does a connection that sends no headers or drips
them (``venus_edge.server.timeouts``, uvicorn has no such timeout). Real uvicorn on 127.0.0.1 and raw sockets;
the assertions are about what the server answered and in what order, never about durations (the sockets' own
timeouts only keep a broken server from hanging the test)."""

from __future__ import annotations

import resource
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from venus_edge.agent import AgentConfig
from venus_edge.cli import main
from venus_edge.server import ResearchService, create_app
from venus_edge.server.timeouts import uvicorn_options
from venus_edge.testing import ScriptedEngine, UvicornThread, answer_turn

PROMISE = (b"POST /v1/research HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: 1000\r\n\r\n")
SAFETY_S = 60.0  # a socket read that waits this long means the server holds the connection: the test fails


@pytest.fixture
def server(tmp_path: Path) -> Iterator[UvicornThread]:
    service = ResearchService([ScriptedEngine([answer_turn("42")] * 4)], [], AgentConfig(),
                              journal_path=tmp_path / "j.jsonl")
    app = create_app(service, body_timeout_s=0.5)
    # the floods below stay under the connection cap: what they test is the timeouts
    options = uvicorn_options(header_timeout_s=0.5, keep_alive_s=30.0, max_connections=2_000)
    with UvicornThread(app, **options) as running:
        yield running
    service.close()


def _connect(server: UvicornThread) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=SAFETY_S)
    return connection


def _answer_then_close(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a read timeout fails the test)."""
    received = b""
    try:
        while chunk := connection.recv(65536):
            received += chunk
    except TimeoutError:
        pytest.fail(f"the server held the connection; it sent {received[:200]!r}")
    finally:
        connection.close()
    return received


def test_five_hundred_promised_bodies_that_never_come_get_408_and_are_closed(server: UvicornThread) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1_200:  # 500 client sockets and the server's 500 in one process
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4_096), hard))
    connections = []
    for _ in range(500):  # the headers go at once: the header timer (0.5 s) runs from the connect, not the flood
        connections.append(_connect(server))
        connections[-1].sendall(PROMISE)
    answers = [_answer_then_close(connection) for connection in connections]
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers), {a[:40] for a in answers}
    assert b"request body not received within 0.5 s" in answers[0]
    assert httpx.get(f"{server.url}/health").status_code == 200, "the server still answers after the flood"


def test_a_connection_that_sends_nothing_gets_408_and_is_closed(server: UvicornThread) -> None:
    answer = _answer_then_close(_connect(server))
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and b"connection: close" in answer


def test_headers_dripped_a_byte_at_a_time_are_cut_off_before_they_end(server: UvicornThread) -> None:
    """A slow loris: one header byte every 0.2 s, 400 bytes in all. The server answers 408 and closes while the
    headers are still coming (before: it waited for them, 80 s)."""
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 350 + b"\r\n\r\n"
    connection = _connect(server)
    sent = 0
    connection.settimeout(0.2)  # one drip interval: the wait between bytes
    answer = b""
    try:
        while sent < len(request):
            connection.sendall(request[sent:sent + 1])
            sent += 1
            try:
                answer = connection.recv(65536)
                break  # the server spoke (or closed) before the headers were complete
            except TimeoutError:
                continue
    except (BrokenPipeError, ConnectionResetError):
        pass
    connection.settimeout(SAFETY_S)
    answer += _answer_then_close(connection)
    assert sent < len(request), "the server waited for every header byte"
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]


def test_the_next_request_on_a_kept_alive_connection_has_the_same_header_timeout(server: UvicornThread) -> None:
    connection = _connect(server)
    connection.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    first = b""
    while b"\r\n\r\n" not in first or not first.rstrip().endswith(b"}"):
        first += connection.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 ")
    connection.sendall(b"GET /health HTTP/1.1\r\nHo")  # half a request, then nothing (keep-alive is 30 s)
    answer = _answer_then_close(connection)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]


def test_a_client_in_time_is_served(server: UvicornThread) -> None:
    response = httpx.post(f"{server.url}/v1/research", json={"question": "q", "stream": False})
    assert response.status_code == 202, response.text


def test_a_connection_over_the_cap_is_answered_503_and_closed_as_it_opens(tmp_path: Path) -> None:
    """Each open connection holds memory and a file descriptor (9,000 stalled bodies: +470 MB; ~20,000 idle ones:
    EMFILE and a traceback per failed accept). The one over ``max_connections`` is refused before anything is read,
    the ones under it are served as before, and once they close a new one is served."""
    service = ResearchService([ScriptedEngine([answer_turn("42")] * 4)], [], AgentConfig(),
                              journal_path=tmp_path / "j.jsonl")
    options = uvicorn_options(header_timeout_s=30.0, keep_alive_s=30.0, max_connections=5)
    try:
        with UvicornThread(create_app(service, body_timeout_s=30.0), **options) as server:
            held = [_connect(server) for _ in range(4)]  # 4 of the 5 allowed
            for connection in held:
                connection.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers not finished
            assert httpx.get(f"{server.url}/health").status_code == 200  # the fifth: under the cap
            with httpx.Client() as kept:  # a kept-alive client holds the fifth
                assert kept.get(f"{server.url}/health").status_code == 200
                refused = [_answer_then_close(_connect(server)) for _ in range(3)]
                assert all(answer.startswith(b"HTTP/1.1 503 ") for answer in refused), refused
                assert b"too many connections open" in refused[0] and b"retry-after: 1" in refused[0]
                held[0].sendall(b"\r\n")  # a held connection finishes its request: still served
                assert _read_response(held[0]).startswith(b"HTTP/1.1 200 ")
            for connection in held:
                connection.close()
            assert _eventually_served(server)
    finally:
        service.close()


def _read_response(connection: socket.socket) -> bytes:
    received = b""
    while b"\r\n\r\n" not in received:
        received += connection.recv(65536)
    return received


def _eventually_served(server: UvicornThread) -> bool:
    """The server notices closed connections as its loop runs: a refusal until then is the cap doing its work."""
    for _ in range(100):
        response = httpx.get(f"{server.url}/health")
        if response.status_code == 200:
            return True
        assert response.status_code == 503, response.text
    return False


@pytest.mark.parametrize("value", ["0", "-3"])
def test_serve_refuses_a_connection_cap_below_one(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--model", "/nonexistent.gguf", "--corpus", ".", "--max-connections", value])
    assert exited.value.code == 2 and "--max-connections must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--header-timeout", "--body-timeout", "--keep-alive"])
def test_serve_refuses_timeouts_that_are_not_positive(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--model", "/nonexistent.gguf", "--corpus", ".", flag, "0"])
    assert exited.value.code == 2
    assert "must be > 0 seconds" in capsys.readouterr().err


def test_serve_help_documents_the_timeouts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--header-timeout S seconds a client has to send a request's headers" in shown
    assert "--body-timeout S seconds a client has to send a request's whole body" in shown
    assert "--keep-alive S seconds an idle connection stays open" in shown
