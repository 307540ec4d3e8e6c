"""Pairing a phone with ``venus-edge serve --lan`` (``venus_edge.server.pairing``): one-time tokens traded for the
key cookie over real HTTP (uvicorn on 127.0.0.1), refused when reused, expired (an injected clock) or wrong, and
never written to a log; the LAN address; the QR code; and ``serve --lan`` itself on the real model."""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
import pytest
import segno

from venus_edge.agent import AgentConfig
from venus_edge.cli import main
from venus_edge.server import ResearchService, create_app
from venus_edge.server.app import KEY_COOKIE, PAIRED_COOKIE_MAX_AGE_S
from venus_edge.server.pairing import (
    PairingTokens,
    lan_address,
    pairing_url,
    print_pairing_code,
)
from venus_edge.session import SetupError
from venus_edge.testing import ScriptedEngine, UvicornThread, answer_turn

if TYPE_CHECKING:
    from conftest import RealModelRun

KEY = "the-servers-key-0123456789"


class Clock:
    """A clock the test moves (seconds)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pairing(clock: Clock) -> PairingTokens:
    return PairingTokens(ttl_s=120, clock=clock)


@pytest.fixture
def server(tmp_path: Path, pairing: PairingTokens) -> Iterator[UvicornThread]:
    """A keyed server that pairs with ``pairing``, uvicorn's own logging left to the loggers (``captured_logs``)."""
    service = ResearchService([ScriptedEngine(lambda prompt: answer_turn("ok"))], [], AgentConfig(),
                              journal_path=tmp_path / "journal.jsonl")
    with UvicornThread(create_app(service, api_key=KEY, pairing=pairing), log_config=None, access_log=True) as running:
        yield running
    service.close()


@pytest.fixture
def captured_logs() -> Iterator[list[str]]:
    """Every record of the server's loggers (uvicorn's access and error logs, venus_edge's) at every level, as
    formatted lines."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Collect(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.access", "uvicorn.error", "venus_edge")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield lines
    for logger, level in zip(loggers, levels):
        logger.removeHandler(handler)
        logger.setLevel(level)


def pair(server: UvicornThread, token: str) -> httpx.Response:
    return httpx.post(f"{server.url}/pair", json={"token": token})


def test_a_pairing_code_pairs_once_and_its_cookie_then_opens_the_api(server: UvicornThread,
                                                                      pairing: PairingTokens) -> None:
    token = pairing.issue()
    with httpx.Client(base_url=server.url) as phone:
        assert phone.get("/v1/sessions").status_code == 401  # not paired yet
        paired = phone.post("/pair", json={"token": token})
        assert paired.status_code == 204, paired.text
        cookie = paired.headers["set-cookie"]
        assert cookie.startswith(f"{KEY_COOKIE}={KEY};")
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/", f"max-age={PAIRED_COOKIE_MAX_AGE_S}"} <= attributes
        assert paired.headers["cache-control"] == "no-store"
        assert phone.get("/v1/sessions").status_code == 200  # the cookie is the key
        assert phone.post("/v1/research", json={"question": "q", "stream": False}).status_code == 202

    replayed = pair(server, token)  # the same link on another device
    assert replayed.status_code == 410 and "set-cookie" not in replayed.headers
    error = replayed.json()["error"]
    assert error["type"] == "authentication_error"
    assert "used already" in error["message"] and "press Enter" in error["message"]
    assert token not in replayed.text and KEY not in replayed.text


def test_an_expired_code_is_refused_and_one_within_its_time_pairs(server: UvicornThread, pairing: PairingTokens,
                                                                   clock: Clock) -> None:
    late, in_time = pairing.issue(), pairing.issue()
    clock.now += 120.5  # both are past their 120 s
    expired = pair(server, late)
    assert expired.status_code == 410 and "set-cookie" not in expired.headers
    assert "expired" in expired.json()["error"]["message"] and "120 s" in expired.json()["error"]["message"]
    assert pair(server, late).status_code == 410  # and stays refused

    fresh = pairing.issue()
    clock.now += 120  # exactly its lifetime: still good
    assert pair(server, fresh).status_code == 204
    assert pair(server, in_time).status_code == 410


def test_a_wrong_code_is_refused_and_spends_nothing(server: UvicornThread, pairing: PairingTokens) -> None:
    token = pairing.issue()
    near_miss = token[:-1] + ("A" if token[-1] != "A" else "B")
    for wrong in (near_miss, token[:-4], token + "x", "", "é" * 40):
        refused = pair(server, wrong)
        assert refused.status_code == 403, (wrong, refused.text)
        assert "not a pairing code of this server" in refused.json()["error"]["message"]
        assert "set-cookie" not in refused.headers
    too_long = pair(server, "t" * 300)
    assert too_long.status_code == 422 and "t" * 300 not in too_long.text
    assert pair(server, token).status_code == 204  # the wrong ones did not use it up


def test_neither_the_key_nor_a_code_reaches_the_logs(server: UvicornThread, pairing: PairingTokens, clock: Clock,
                                                     captured_logs: list[str]) -> None:
    """Pairing, a replay, an expired and a wrong code, and API calls with the cookie, with every logger of the
    server at DEBUG and uvicorn's access log on: the log says what happened, and holds no key and no code."""
    used, expired, good = pairing.issue(), pairing.issue(), pairing.issue()
    with httpx.Client(base_url=server.url) as phone:
        assert phone.post("/pair", json={"token": used}).status_code == 204
        assert phone.get("/v1/sessions").status_code == 200
        assert phone.get("/health", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert pair(server, used).status_code == 410
    assert pair(server, good[::-1]).status_code == 403
    clock.now += 1_000
    assert pair(server, expired).status_code == 410
    text = "\n".join(captured_logs)
    assert re.search(r'"POST /pair HTTP/1.1" 204', text) and '"GET /v1/sessions HTTP/1.1" 200' in text, text
    assert "paired the device at 127.0.0.1" in text and "refused a pairing code from 127.0.0.1: used" in text
    assert ": expired" in text and ": wrong" in text
    for secret in (KEY, used, expired, good, good[::-1]):
        assert secret not in text


def test_only_the_shell_and_pairing_are_open_without_the_key(server: UvicornThread) -> None:
    page = httpx.get(f"{server.url}/pair")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store" and page.headers["referrer-policy"] == "no-referrer"
    assert "location.hash" in page.text  # the token is read from the fragment, which no request carries
    for method, path in (("GET", "/health"), ("GET", "/v1/sessions"), ("PUT", "/pair"), ("GET", "/icon-64.png")):
        assert httpx.request(method, f"{server.url}{path}").status_code == 401, (method, path)


def test_a_server_without_pairing_has_no_pair_route_and_pairing_needs_a_key(tmp_path: Path) -> None:
    service = ResearchService([ScriptedEngine([])], [], AgentConfig(), journal_path=tmp_path / "journal.jsonl")
    with pytest.raises(ValueError, match="give api_key"):
        create_app(service, pairing=PairingTokens())
    with UvicornThread(create_app(service, api_key=KEY)) as keyed:
        assert httpx.get(f"{keyed.url}/pair").status_code == 404
        refused = httpx.post(f"{keyed.url}/pair", json={"token": "anything"})
    service.close()
    assert refused.status_code == 404 and "serve --lan" in refused.json()["error"]["message"]


def test_a_key_with_any_characters_travels_in_the_paired_cookie(tmp_path: Path) -> None:
    key = 'a b;c,"d\\é'
    tokens = PairingTokens()
    service = ResearchService([ScriptedEngine([])], [], AgentConfig(), journal_path=tmp_path / "journal.jsonl")
    with UvicornThread(create_app(service, api_key=key, pairing=tokens)) as running, \
            httpx.Client(base_url=running.url) as phone:
        assert phone.post("/pair", json={"token": tokens.issue()}).status_code == 204
        listed = phone.get("/v1/sessions")
    service.close()
    assert listed.status_code == 200


def test_tokens_live_their_time_once_and_bad_lifetimes_are_refused(clock: Clock) -> None:
    tokens = PairingTokens(ttl_s=60, clock=clock)
    first, second = tokens.issue(), tokens.issue()
    assert first != second and len(first) >= 32
    assert [tokens.redeem(first), tokens.redeem(first)] == ["paired", "used"]
    clock.now += 61
    assert [tokens.redeem(second), tokens.redeem("nope")] == ["expired", "wrong"]
    for outcome in ("used", "expired", "wrong"):
        assert first not in tokens.refusal(outcome) and "new code" in tokens.refusal(outcome)
    with pytest.raises(ValueError, match="> 0 s"):
        PairingTokens(ttl_s=0)


# ---------------------------------------------------------------------------------------------- the address, the code
def test_the_lan_address_is_the_default_routes_or_a_clear_error() -> None:
    """Here the machine has a network (the address is not loopback), or says what to do; a route that leaves from
    loopback, and a probe the kernel refuses, are the clear errors."""
    try:
        address = lan_address()
    except SetupError as exc:  # a machine without a network
        assert "--host" in str(exc)
    else:
        assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", address) and not address.startswith("127.")
    with pytest.raises(SetupError, match=r"no LAN address .* from 127\.0\.0\.1.*--host ADDR"):
        lan_address(route_probe="127.0.0.1")
    with pytest.raises(SetupError, match=r"no route to a network .*--host ADDR"):
        lan_address(route_probe="255.255.255.255")  # a broadcast address: connect() is refused


def test_the_pairing_link_and_its_qr_code() -> None:
    """segno cannot read codes back: the test checks the link given to it and that what is printed is segno's
    drawing of exactly that link."""
    url = pairing_url("192.168.1.20", 8765, "tok_EN-123")
    assert url == "http://192.168.1.20:8765/pair#token=tok_EN-123"
    assert pairing_url("fe80::1", 80, "t") == "http://[fe80::1]:80/pair#token=t"
    printed = io.StringIO()
    print_pairing_code(url, printed, ttl_s=300)
    drawing = io.StringIO()
    segno.make(url, error="m").terminal(out=drawing, compact=True)
    text = printed.getvalue()
    assert drawing.getvalue() in text and f"or open {url}\n" in text and "works once, for 300 s" in text


def test_serve_lan_refuses_a_bad_pairing_lifetime_and_a_public_host_names_lan(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--lan", "--host", "127.0.0.1", "--pairing-ttl", "0", "--model", "/nonexistent.gguf"])
    assert exited.value.code == 2 and "--pairing-ttl must be > 0 seconds, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--host", "0.0.0.0", "--model", "/nonexistent.gguf"])
    assert "or --lan to pair them" in capsys.readouterr().err


def test_serve_lan_prints_a_code_that_pairs_a_client_once_on_the_real_model(
        tmp_path: Path, smollm2_gguf: Path, docs_corpus: Path, real_model_run: RealModelRun) -> None:
    """``venus-edge serve --lan --host 127.0.0.1`` as a user starts it (the host given, as on a machine whose LAN
    address a test cannot reach): it prints a QR code and the link; the link's code pairs a client once, whose
    cookie opens the API; Enter in its terminal prints a new code; the key it made is printed nowhere."""
    command = [sys.executable, "-m", "venus_edge.cli", "serve", "--lan", "--host", "127.0.0.1", "--port", "0",
               "--model", str(smollm2_gguf), "--corpus", str(docs_corpus), "--extractive-visit", "--n-ctx", "2048",
               "--threads", "2", "--no-prompt-cache", "--journal", str(tmp_path / "journal.jsonl"),
               *real_model_run.cli_args()]
    terminal, terminal_end = pty.openpty()  # stdin is a terminal: Enter prints a new code
    process = subprocess.Popen(command, stdin=terminal_end, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    os.close(terminal_end)
    output: list[str] = []

    def next_link() -> str:
        assert process.stderr is not None
        for line in process.stderr:
            output.append(line)
            if line.startswith("or open "):
                return line.removeprefix("or open ").strip()
        raise AssertionError("".join(output))

    try:
        link = next_link()
        banner = next(line for line in output if line.startswith("venus-edge serve:"))
        assert "API key required; pair a device with the code below" in banner, banner
        assert sum(line.count("█") for line in output) > 100  # the QR code, drawn in blocks
        parts = urlsplit(link)
        assert (parts.scheme, parts.hostname, parts.path) == ("http", "127.0.0.1", "/pair")
        token = parts.fragment.removeprefix("token=")
        base = f"http://127.0.0.1:{parts.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.2)
        with httpx.Client(base_url=base) as phone:
            assert phone.get("/v1/sessions").status_code == 401
            assert phone.post("/pair", json={"token": token}).status_code == 204
            assert phone.get("/v1/sessions").status_code == 200
            key = phone.cookies[KEY_COOKIE]
        refused = httpx.post(f"{base}/pair", json={"token": token})
        assert refused.status_code == 410 and "press Enter" in refused.json()["error"]["message"]
        assert httpx.get(f"{base}/health", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        os.write(terminal, b"\n")  # as the refusal says: Enter in the server's terminal gives a new code
        second = urlsplit(next_link()).fragment.removeprefix("token=")
        assert second != token and httpx.post(f"{base}/pair", json={"token": second}).status_code == 204
    finally:
        process.terminate()
        rest = process.communicate(timeout=30)[1]
        os.close(terminal)
    printed = "".join(output) + rest
    assert "Press Enter here for a new code" in printed
    assert len(key) >= 40 and key not in printed
    assert printed.count(token) == 1 and printed.count(second) == 1  # only in the links; no log line repeats them
