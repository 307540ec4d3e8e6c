"""The visit tool: exact schema and observation text, corpus and HTTP reads, every failure kind, the
completer's repair, retry and fallback. HTTP goes to a real server on 127.0.0.1 (conftest.py)."""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from venus_edge.tools import ToolRegistry
from venus_edge.tools.corpus import Corpus
from venus_edge.tools.fetch import FetchLimits, checked_transport
from venus_edge.tools.visit import VisitTool, format_visit_section, parse_extraction

VISIT_SCHEMA_TEXT = (
    '{"type": "function", "function": {"name": "visit", "description": "Visit webpage(s) and return the summary of '
    'the content.", "parameters": {"type": "object", "properties": {"url": {"type": "array", "items": {"type": '
    '"string"}, "description": "The URL(s) of the webpage(s) to visit. Can be a single URL or an array of URLs."}, '
    '"goal": {"type": "string", "description": "The specific information goal for visiting webpage(s)."}}, '
    '"required": ["url", "goal"]}}}'
)
GOAL = "What is the default pickle protocol?"
PICKLE = "corpus://pydocs/library/pickle.html"
FAST = FetchLimits(connect_timeout_s=0.5, read_timeout_s=0.5, total_timeout_s=5.0, max_bytes=100_000, max_redirects=3)
CANNED = json.dumps(
    {"rational": "The constants section answers it.", "evidence": "Currently the default protocol is 4.",
     "summary": "Protocol 4 is the default."}
)


def unreadable(url: str, goal: str) -> str:
    """The reference tool's fixed text for a page it could not read (DR-Venus tool_visit.py)."""
    return (
        f"The useful information in {url} for user goal {goal} as follows: \n\n"
        "Evidence in page: \nThe provided webpage content could not be accessed. Please check the URL or file format.\n"
        "\n"
        "Summary: \nThe webpage content could not be processed, and therefore, no information is available.\n\n"
    )


def test_schema_renders_byte_for_byte() -> None:
    tool = VisitTool()
    assert json.dumps(tool.schema) == VISIT_SCHEMA_TEXT and tool.name == "visit"


def test_observation_with_completer_is_exact(subset_corpus: Corpus, scripted_completer: type) -> None:
    completer = scripted_completer([CANNED])
    result = VisitTool(corpora=[subset_corpus], completer=completer)({"url": PICKLE, "goal": GOAL})
    assert result.text == (
        f"The useful information in {PICKLE} for user goal {GOAL} as follows: \n\n"
        "Evidence in page: \nCurrently the default protocol is 4.\n\n"
        "Summary: \nProtocol 4 is the default."
    )
    assert result.visited_urls == (PICKLE,) and result.failures == ()
    assert len(completer.calls) == 1
    prompt = completer.calls[0][0]["content"]
    assert GOAL in prompt and PICKLE in prompt and "Currently the default protocol is 4" in prompt, prompt[:500]


def test_several_urls_joined_and_stripped_exactly(subset_corpus: Corpus, scripted_completer: type) -> None:
    """Blocks joined by "\\n=======\\n", trailing whitespace stripped once, one block per URL as named (repeats
    included, as the reference's observation); a page named twice is read, summarized and counted once."""
    completer = scripted_completer([CANNED])
    missing = "corpus://pydocs/library/missing.html"
    urls = [PICKLE, missing, PICKLE, missing, PICKLE]
    result = VisitTool(corpora=[subset_corpus], completer=completer)({"url": urls, "goal": GOAL})
    good = format_visit_section(PICKLE, GOAL, "Currently the default protocol is 4.", "Protocol 4 is the default.")
    bad = unreadable(missing, GOAL)
    assert result.text == "\n=======\n".join([good, bad, good, bad, good]).strip()
    assert result.visited_urls == (PICKLE,)
    assert [(f.kind, f.target) for f in result.failures] == [("not_found", missing)]
    assert len(completer.calls) == 1


def test_extractive_output_without_completer(subset_corpus: Corpus) -> None:
    result = VisitTool(corpora=[subset_corpus])({"url": [PICKLE], "goal": GOAL})
    head = f"The useful information in {PICKLE} for user goal {GOAL} as follows: \n\nEvidence in page: \n"
    assert result.text.startswith(head), result.text[:300]
    evidence, summary = result.text[len(head) :].split("\n\nSummary: \n")
    assert "Currently the default protocol is 4" in evidence, evidence
    assert summary and summary in " ".join(evidence.split()), summary
    assert len(evidence) / 4 <= 1300, len(evidence)


def test_fenced_json_with_prose_is_repaired(subset_corpus: Corpus, scripted_completer: type) -> None:
    reply = ('Sure! Here it is:\n```json\n{"rational": "r", "evidence": ["line one", "line two"], "summary": "s"}\n'
             '```\nDone.')
    completer = scripted_completer([reply])
    result = VisitTool(corpora=[subset_corpus], completer=completer)({"url": PICKLE, "goal": GOAL})
    assert "Evidence in page: \nline one\nline two\n\nSummary: \ns" in result.text, result.text
    assert len(completer.calls) == 1


def test_garbage_is_retried_then_parsed(subset_corpus: Corpus, scripted_completer: type) -> None:
    completer = scripted_completer(["no json here", '{"evidence": "unterminated', CANNED])
    result = VisitTool(corpora=[subset_corpus], completer=completer)({"url": PICKLE, "goal": GOAL})
    assert "Summary: \nProtocol 4 is the default." in result.text and result.failures == ()
    assert len(completer.calls) == 3
    retry = completer.calls[1]
    assert [m["role"] for m in retry] == ["user", "assistant", "user"] and retry[1]["content"] == "no json here"


def test_garbage_three_times_falls_back_to_extractive(subset_corpus: Corpus, scripted_completer: type) -> None:
    completer = scripted_completer(["garbage", "{not json}", '{"summary": "no evidence key"}'])
    result = VisitTool(corpora=[subset_corpus], completer=completer)({"url": PICKLE, "goal": GOAL})
    assert len(completer.calls) == 3
    assert "Currently the default protocol is 4" in result.text
    assert result.visited_urls == (PICKLE,)
    assert [(f.kind, f.target) for f in result.failures] == [("backend_error", PICKLE)]


def test_completer_exception_falls_back(subset_corpus: Corpus, scripted_completer: type) -> None:
    completer = scripted_completer([RuntimeError("llama context lost")])
    result = VisitTool(corpora=[subset_corpus], completer=completer)({"url": PICKLE, "goal": GOAL})
    assert "Currently the default protocol is 4" in result.text and len(completer.calls) == 1
    assert "llama context lost" in result.failures[0].detail


def test_parse_extraction_rules() -> None:
    assert parse_extraction('{"rational": 1, "evidence": "e", "summary": "s"}') == {
        "rational": "1",
        "evidence": "e",
        "summary": "s",
    }
    assert parse_extraction('["a list"]') is None
    assert parse_extraction('{"evidence": "", "summary": "s"}') is None
    assert parse_extraction("") is None


def test_unknown_corpus_is_not_found(subset_corpus: Corpus) -> None:
    result = VisitTool(corpora=[subset_corpus])({"url": "corpus://elsewhere/x.html", "goal": "g"})
    assert result.text == unreadable("corpus://elsewhere/x.html", "g").strip()
    assert result.failures[0].kind == "not_found" and result.visited_urls == ()


def test_count_tokens_callable_sets_the_budget(subset_corpus: Corpus, scripted_completer: type) -> None:
    counted: list[str] = []

    def words(text: str) -> int:
        counted.append(text)
        return len(text.split())

    completer = scripted_completer([CANNED])
    VisitTool(corpora=[subset_corpus], completer=completer, count_tokens=words, reduce_budget_tokens=120)(
        {"url": PICKLE, "goal": GOAL}
    )
    page = completer.calls[0][0]["content"].split("<page>\n", 1)[1].split("\n</page>", 1)[0]
    assert counted and len(page.split()) <= 120, len(page.split())


# ---- HTTP ---------------------------------------------------------------------------------------------------


def visit_http(url: str, **kwargs: object) -> tuple[str, tuple, tuple]:
    with VisitTool(limits=FAST, allow_private=True, **kwargs) as tool:  # type: ignore[arg-type]
        result = tool({"url": [url], "goal": "When was tomllib added?"})
    return result.text, result.visited_urls, result.failures


def test_http_page_is_read(server_url: str) -> None:
    url = f"{server_url}/docs/library/tomllib.html"
    text, visited, failures = visit_http(url)
    assert visited == (url,) and failures == ()
    assert "New in version 3.11" in text, text[:1000]


def test_http_redirect_followed_and_original_url_reported(server_url: str) -> None:
    url = f"{server_url}/redirect-to-docs"
    text, visited, failures = visit_http(url)
    assert visited == (url,) and failures == () and "tomllib" in text


def test_plain_text_keeps_the_relevant_paragraph(server_url: str) -> None:
    with VisitTool(limits=FAST, allow_private=True) as tool:
        result = tool({"url": f"{server_url}/text", "goal": "frobnicator timeout"})
    assert "The frobnicator now accepts a timeout in seconds." in result.text
    assert "weather" not in result.text, result.text


@pytest.mark.parametrize(
    ("path", "kind", "detail"),
    [
        ("/403", "blocked", "403"),
        ("/no-such-page", "http_error", "404"),
        ("/slow", "timeout", ""),
        ("/huge", "too_large", "100000"),
        ("/huge-declared", "too_large", "Content-Length"),
        ("/loop", "too_many_redirects", "3"),
        ("/binary", "not_text", "image/png"),
        ("/octet", "not_text", "NUL"),
        ("/empty", "empty", ""),
        ("/js-shell", "empty", "script-only page"),
    ],
)
def test_http_failures_give_fixed_text_and_typed_failure(server_url: str, path: str, kind: str, detail: str) -> None:
    url = f"{server_url}{path}"
    text, visited, failures = visit_http(url)
    assert text == unreadable(url, "When was tomllib added?").strip()
    assert visited == ()
    assert [f.kind for f in failures] == [kind] and detail in failures[0].detail, failures


def test_urls_of_one_call_are_fetched_concurrently(server_url: str) -> None:
    """Each /together-* request is answered only while all three are in flight: a sequential visit gets 503s."""
    urls = [f"{server_url}/together-{name}" for name in ("a", "b", "c")]
    limits = FetchLimits(read_timeout_s=10, total_timeout_s=15)  # past the server's 5 s wait, so a lone request 503s
    with VisitTool(limits=limits, allow_private=True) as tool:
        result = tool({"url": urls, "goal": "who arrived together"})
    assert result.failures == () and result.visited_urls == tuple(urls), result.failures
    sections = result.text.split("\n=======\n")
    assert [f"{name} arrived together" in section for name, section in zip("abc", sections)] == [True] * 3


def test_connection_refused_is_unreachable() -> None:
    _text, visited, failures = visit_http("http://127.0.0.1:1/")
    assert failures[0].kind == "unreachable" and visited == ()


@pytest.mark.parametrize(
    "url",
    [
        "LOOPBACK",
        "http://localhost/",
        "http://10.0.0.1/",
        "http://192.168.1.1/admin",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "file:///etc/passwd",
        "ftp://example.org/file.txt",
    ],
)
def test_private_addresses_and_other_schemes_refused(server_url: str, url: str) -> None:
    url = f"{server_url}/docs/library/tomllib.html" if url == "LOOPBACK" else url
    with VisitTool(limits=FAST) as tool:
        result = tool({"url": url, "goal": "g"})
    assert result.text == unreadable(url, "g").strip()
    assert [f.kind for f in result.failures] == ["refused_address"], result.failures


def test_redirect_to_private_address_refused() -> None:
    """A public first hop that redirects to the metadata address: the second hop is never requested."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        result = VisitTool(http_client=client, limits=FAST)({"url": "http://93.184.216.34/start", "goal": "g"})
    assert seen == ["http://93.184.216.34/start"]
    assert [f.kind for f in result.failures] == ["refused_address"] and "169.254.169.254" in result.failures[0].detail


def test_hostnames_judged_by_their_resolved_addresses() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/plain"}, text="Hello from a public host.")

    def resolve(host: str, port: int) -> list[str]:
        if host == "nowhere.test":
            raise OSError("Name or service not known")
        return {"public.test": ["93.184.216.34"], "sneaky.test": ["93.184.216.34", "10.1.2.3"]}[host]

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        tool = VisitTool(http_client=client, limits=FAST, resolve=resolve)
        ok = tool({"url": "http://public.test/", "goal": "hello"})
        refused = tool({"url": "http://sneaky.test/", "goal": "hello"})
        unknown = tool({"url": "http://nowhere.test/", "goal": "hello"})
    assert ok.visited_urls == ("http://public.test/",) and "Hello from a public host." in ok.text
    assert [f.kind for f in refused.failures] == ["refused_address"]
    assert [f.kind for f in unknown.failures] == ["unreachable"]


def test_connections_go_to_the_address_the_resolver_checked(local_server: Any) -> None:
    """A name only our resolver knows is fetched: the connection used the checked address, not system DNS."""
    url = f"http://docs.example:{local_server.port}/docs/library/tomllib.html"
    with VisitTool(limits=FAST, allow_private=True, resolve=lambda host, port: ["127.0.0.1"]) as tool:
        result = tool({"url": url, "goal": "When was tomllib added?"})
    assert result.failures == () and result.visited_urls == (url,) and "3.11" in result.text


def test_dns_rebinding_is_refused_at_connect(local_server: Any) -> None:
    """Public for the check, loopback for the connection: the second answer is checked too, and refused."""
    answers = [["93.184.216.34"], ["127.0.0.1"]]
    asked: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return answers[min(len(asked), len(answers)) - 1]

    url = f"http://rebind.example:{local_server.port}/docs/library/tomllib.html"
    with VisitTool(limits=FAST, resolve=rebinding) as tool:
        result = tool({"url": url, "goal": "g"})
    assert asked == ["rebind.example", "rebind.example"], "checked per hop, then again at connect"
    assert [f.kind for f in result.failures] == ["refused_address"] and "127.0.0.1" in result.failures[0].detail
    assert result.failures[0].target == url and result.visited_urls == ()


def test_tls_verifies_the_host_name_while_connecting_to_the_checked_address(
    tls_server: tuple[Any, ssl.SSLContext],
) -> None:
    server, trust = tls_server
    transport = checked_transport(allow_private=True, resolve=lambda host, port: ["127.0.0.1"], verify=trust)
    with httpx.Client(transport=transport) as client:
        tool = VisitTool(http_client=client, limits=FAST, allow_private=True)
        good = tool({"url": f"https://docs.example:{server.port}/docs/library/tomllib.html", "goal": "tomllib"})
        wrong_name = tool({"url": f"https://other.example:{server.port}/docs/library/tomllib.html", "goal": "x"})
    assert good.failures == () and "3.11" in good.text
    assert [f.kind for f in wrong_name.failures] == ["unreachable"], wrong_name.failures
    assert "CERTIFICATE_VERIFY_FAILED" in wrong_name.failures[0].detail


def test_registry_validates_visit_arguments(subset_corpus: Corpus) -> None:
    registry = ToolRegistry([VisitTool(corpora=[subset_corpus])])
    assert registry.call("visit", {"url": PICKLE, "goal": GOAL}).visited_urls == (PICKLE,)
    with pytest.raises(ValueError, match="goal"):
        registry.call("visit", {"url": PICKLE})


def test_the_agent_loop_goes_on_past_every_failure(server_url: str) -> None:
    """One session visits every failing page of the server, one per turn, then answers: each turn gets the fixed
    observation and a typed failure in its event, and the session still ends with an answer."""
    from venus_edge.agent import Agent, AgentConfig
    from venus_edge.events import ToolReturned
    from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn

    cases = {
        "/403": "blocked",
        "/no-such-page": "http_error",
        "/slow": "timeout",
        "/huge": "too_large",
        "/loop": "too_many_redirects",
        "/redirect-private": "refused_address",
        "/js-shell": "empty",
        "/binary": "not_text",
        "/pdf-broken": "not_text",
    }
    turns = [tool_call_turn("visit", url=[f"{server_url}{path}"], goal="g") for path in cases]
    with VisitTool(limits=FAST, allowed_networks=["127.0.0.1/32"]) as visit:
        agent = Agent(ScriptedEngine([*turns, answer_turn("done")]), [visit], config=AgentConfig())
        events = list(_drain(agent.events("q")))
    returned = [e for e in events if isinstance(e, ToolReturned)]
    assert [[f["kind"] for f in e.failures] for e in returned] == [[kind] for kind in cases.values()]
    assert all(e.visited_urls == [] for e in returned)
    assert events[-1].result.termination == "answered" and events[-1].result.answer == "done"


def _drain(stream: Any) -> Any:
    while True:
        try:
            yield next(stream)
        except StopIteration:
            return


def test_allowed_networks_must_be_networks() -> None:
    with pytest.raises(ValueError, match="not-a-network"):
        VisitTool(allowed_networks=["not-a-network"])


@pytest.mark.parametrize(
    ("path", "kind", "detail"),
    [
        ("/gzip-bomb", "too_large", "decoded"),
        ("/gzip-twice", "not_text", "gzip, gzip"),
        ("/gzip-broken", "not_text", "cannot be decoded"),
    ],
)
def test_compressed_bodies_are_capped_after_decoding(server_url: str, path: str, kind: str, detail: str) -> None:
    """40 KB of gzip that would inflate to 40 MB stops at max_bytes (100 KB here), inflated step by step; stacked
    or broken encodings are typed failures and never raise into the caller."""
    url = f"{server_url}{path}"
    text, _visited, failures = visit_http(url)
    assert [f.kind for f in failures] == [kind] and detail in failures[0].detail, failures
    assert text == unreadable(url, "When was tomllib added?").strip()


def test_a_gzip_page_is_read_and_a_broken_one_does_not_sink_the_others(server_url: str) -> None:
    urls = [f"{server_url}/gzip", f"{server_url}/gzip-broken", f"{server_url}/text"]
    with VisitTool(limits=FAST, allowed_networks=["127.0.0.1/32"]) as tool:
        result = tool({"url": urls, "goal": "frobnicator"})
    assert result.visited_urls == (urls[0], urls[2]) and [f.kind for f in result.failures] == ["not_text"]
    assert "compressed with gzip for transport" in result.text


def test_the_total_time_limit_holds_across_redirects_and_dripped_headers(server_url: str) -> None:
    """Each redirect hop waits 0.4 s and each header byte 0.2 s: no single read times out, the whole fetch
    does (the drip: visit leaves the read behind READ_GRACE_S after total_timeout_s). Unbounded, the hops would
    end at max_redirects after 8 s and the drip when the server closes after 20 s, neither a timeout; how soon
    after the deadline each stops is measured in benchmarks/bench_deadlines.py."""
    limits = FetchLimits(read_timeout_s=1.0, total_timeout_s=1.0, max_redirects=20)
    with VisitTool(limits=limits, allowed_networks=["127.0.0.1/32"]) as tool:
        hops = tool({"url": f"{server_url}/hop-0", "goal": "g"})
        drip = tool({"url": f"{server_url}/drip", "goal": "g"})
    assert [f.kind for f in hops.failures] == ["timeout"]
    assert [f.kind for f in drip.failures] == ["timeout"]


def test_a_proxy_from_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """With HTTP_PROXY set, visit goes through the proxy (which resolves the name), the per-hop check stays."""
    seen: list[str] = []

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.path)
            body = b"<html><body><p>Served by the proxy for the frobnicator question.</p></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.server_address[1]}")
        public_names = {"docs.example": ["93.184.216.34"], "10.0.0.1": ["10.0.0.1"]}
        with VisitTool(limits=FAST, resolve=lambda host, port: public_names[host]) as tool:
            result = tool({"url": "http://docs.example/page", "goal": "frobnicator"})
            refused = tool({"url": "http://10.0.0.1/page", "goal": "g"})
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["http://docs.example/page"] and "Served by the proxy" in result.text
    assert [f.kind for f in refused.failures] == ["refused_address"]


@pytest.mark.parametrize(
    "host",
    [
        "[64:ff9b::a9fe:a9fe]",
        "[2002:a00:1::]",
        "[::a00:1]",
        "[::ffff:0:a00:1]",
        "[fec0::1]",
        "[2001:0:4136:e378:8000:63bf:f5ff:fffe]",  # Teredo, client 10.0.0.1
    ],
)
def test_ipv6_forms_of_private_ipv4_addresses_are_refused(host: str) -> None:
    """NAT64, 6to4, IPv4-compatible, SIIT and Teredo addresses lead to the IPv4 address inside them."""
    with VisitTool(limits=FAST) as tool:
        result = tool({"url": f"http://{host}/latest/meta-data/", "goal": "g"})
    assert [f.kind for f in result.failures] == ["refused_address"], result.failures


def test_a_stuck_read_does_not_starve_the_urls_behind_it(server_url: str) -> None:
    """One read at a time; the first server drips its headers forever: it is left behind at its deadline and
    the pages queued behind it are still read."""
    urls = [f"{server_url}/drip", f"{server_url}/text", f"{server_url}/gzip"]
    limits = FetchLimits(read_timeout_s=1.0, total_timeout_s=1.0)
    with VisitTool(limits=limits, allowed_networks=["127.0.0.1/32"], max_concurrent_reads=1) as tool:
        result = tool({"url": urls, "goal": "frobnicator"})
    assert [f.kind for f in result.failures] == ["timeout"] and result.visited_urls == tuple(urls[1:])


def test_unproxied_requests_keep_the_connect_time_check(monkeypatch: pytest.MonkeyPatch, local_server: Any) -> None:
    """Only HTTPS goes through the proxy: an http:// URL is fetched directly, and rebinding is refused there."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])
    url = f"http://rebind.example:{local_server.port}/docs/library/tomllib.html"
    with VisitTool(limits=FAST, resolve=lambda host, port: next(answers)) as tool:
        result = tool({"url": url, "goal": "g"})
    assert [f.kind for f in result.failures] == ["refused_address"] and "127.0.0.1" in result.failures[0].detail
