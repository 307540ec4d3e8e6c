"""A model server whose replies have another shape (a field missing, text where a number goes, a list where an
object goes: another server or version behind the URL) gets one ``EngineConnectionError`` naming the request, never
a bare ``KeyError``/``TypeError`` from the line that read it, and the engine keeps working once the replies are right
again. The server is a stub on 127.0.0.1 that answers as llama-server, vLLM or SGLang would, route by route."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from venus_edge.engines.base import SamplingParams
from venus_edge.engines.openai import OpenAIEngine
from venus_edge.errors import EngineConnectionError

NOT_FOUND = object()
GOOD_EVENTS = [{"choices": [{"text": "a", "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.1]},
                             "finish_reason": None}]},
               {"choices": [{"text": "", "finish_reason": "stop"}]}]
GOOD = {
    "openai": {"/props": NOT_FOUND, "/get_model_info": NOT_FOUND,
               "/v1/models": {"data": [{"id": "m", "max_model_len": 512}]},
               "/tokenize": {"tokens": [1]}, "/detokenize": {"prompt": "a"}, "/v1/completions": GOOD_EVENTS},
    "llama-server": {"/props": {"n_ctx": 512}, "/v1/models": {"data": [{"id": "m"}]},
                     "/tokenize": {"tokens": [1]}, "/detokenize": {"content": "a"},
                     "/completion": {"tokens": [5], "completion_probabilities": [{"id": 5, "logprob": -0.1}],
                                     "timings": {"prompt_n": 1, "prompt_ms": 1.0}, "stop_type": "limit"}},
    "sglang": {"/props": NOT_FOUND, "/get_model_info": {"model_path": "/m"},
               "/v1/models": {"data": [{"id": "m", "max_model_len": 512}]}, "/tokenize": {"tokens": [1]},
               "/detokenize": {"prompt": "a"},
               "/generate": {"meta_info": {"output_token_logprobs": [[-0.1, 5, "a"]], "finish_reason":
                                           {"type": "length"}, "cached_tokens": 0}}},
}


class Raw:
    """A reply sent as it is: ``body`` with ``content_type``, ``status`` and extra ``headers``."""

    def __init__(self, body: str, content_type: str = "text/event-stream", status: int = 200,
                 headers: dict[str, str] | None = None) -> None:
        self.body, self.content_type, self.status, self.headers = body.encode(), content_type, status, headers or {}


class StubServer:
    """Answers each route from ``routes`` (mutable): a JSON value, a list of events for a streamed route (sent as
    ``data:`` lines, then ``[DONE]``), a ``Raw`` reply, or ``NOT_FOUND``. ``requests`` counts what it answered."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.requests: dict[str, int] = {}
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                reply = routes.get(self.path, NOT_FOUND)
                requests[self.path] = requests.get(self.path, 0) + 1
                headers: dict[str, str] = {}
                if isinstance(reply, Raw):
                    status, body, kind, headers = reply.status, reply.body, reply.content_type, reply.headers
                elif reply is NOT_FOUND:
                    status, body, kind = 404, b'{"error": "not found"}', "application/json"
                elif self.path == "/v1/completions":
                    status, kind = 200, "text/event-stream"
                    body = "".join(f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n"
                                   for event in [*reply, "[DONE]"]).encode()
                else:
                    status, body, kind = 200, json.dumps(reply).encode(), "application/json"
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[StubServer] = []

    def start(kind: str, **changed: Any) -> StubServer:
        servers.append(StubServer({**GOOD[kind], **changed}))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _malformed(request: str) -> str:
    return rf"model server http://127\.0\.0\.1:\d+: {request} answered in a form this engine cannot read \(\w+Error"


@pytest.mark.parametrize(("kind", "route", "reply"), [
    ("openai", "/v1/models", [1, 2]),  # a list where the object goes
    ("openai", "/v1/models", {"data": "models"}),  # text where the list goes
    ("openai", "/v1/models", {"data": [{"id": "m", "max_model_len": "lots"}]}),
    ("llama-server", "/props", {"n_ctx": "big"}),
    ("llama-server", "/props", ["n_ctx", 512]),
    ("openai", "/tokenize", {"tokens": [{"token": 1}]}),  # an object without its id
    ("openai", "/tokenize", {"tokens": ["one"]}),
    ("openai", "/tokenize", {"tokens": 5}),
    ("openai", "/tokenize", "tokens"),
    ("openai", "/tokenize", {"tokens": [1e400]}),  # JSON's 1e400 reads as infinity: no int
    ("llama-server", "/props", {"n_ctx": 1e400}),
    ("openai", "/v1/models", {"data": [{"id": "m", "max_model_len": 1e400}]}),
])
def test_a_discovery_reply_of_another_shape_is_one_clear_error(serve, kind, route, reply):
    server = serve(kind, **{route: reply})
    request = ("GET " if route in ("/v1/models", "/props") else "POST ") + route
    with pytest.raises(EngineConnectionError, match=_malformed(request)):
        OpenAIEngine(server.url, max_retries=1)


@pytest.mark.parametrize("event", [
    [1, 2],  # not an object
    {"choices": "none"},
    {"choices": [["a"]]},
    {"choices": [{"text": "a", "logprobs": {"content": [{"bytes": [97], "logprob": -0.1}]}}]},  # no id
    {"choices": [{"text": "a", "logprobs": {"content": [{"id": "five", "bytes": [97]}]}}]},
    {"choices": [{"text": "a", "logprobs": {"tokens": ["token_id:five"], "token_logprobs": [-0.1]}}]},
    {"choices": [{"text": "a", "logprobs": {"tokens": ["token_id:5"], "token_logprobs": 3}}]},
    {"choices": [{"text": "a", "logprobs": {"tokens": ["token_id:5"], "token_logprobs": ["low"]}}]},
    {"choices": [{"text": "a", "logprobs": ["token_id:5"]}]},
    {"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": "all"}}},
    {"choices": [], "usage": ["prompt_tokens", 1]},
    {"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": 1e400}}},
    {"choices": [], "timings": {"prompt_n": 1e400}},
    {"choices": [{"text": "a", "logprobs": {"content": [{"id": 1e400, "bytes": [97]}]}}]},
    {"choices": [{"text": {"a": 1}}]},  # text that is not text
    {"choices": [{"text": "ab", "logprobs": {"tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-0.1]}}]},
])
def test_a_streamed_event_of_another_shape_ends_the_call_and_the_engine_goes_on(serve, event):
    server = serve("openai")
    engine = OpenAIEngine(server.url, max_retries=1)
    server.routes["/v1/completions"] = [event]
    expected = ("streamed an event that is not a JSON object" if not isinstance(event, dict)
                else _malformed("POST /v1/completions"))
    with pytest.raises(EngineConnectionError, match=expected):
        engine.generate([1, 2], sampling=SamplingParams(max_tokens=4, logprobs=True))
    server.routes["/v1/completions"] = GOOD_EVENTS
    done = engine.generate([1, 2], sampling=SamplingParams(max_tokens=4, logprobs=True))
    assert (done.token_ids, done.text, done.finish_reason) == ([5], "a", "eog")


@pytest.mark.parametrize("reply", [["a"], {"content": None}, {"prompt": 5}])
def test_a_detokenize_reply_of_another_shape_is_one_clear_error(serve, reply):
    server = serve("openai", **{"/detokenize": reply})
    engine = OpenAIEngine(server.url, max_retries=1)
    with pytest.raises(EngineConnectionError, match=_malformed("POST /detokenize")):
        engine.detokenize([5])
    server.routes["/detokenize"] = {"prompt": "a"}
    assert engine.detokenize([5]) == "a"


@pytest.mark.parametrize(("kind", "route", "reply", "expected"), [
    ("llama-server", "/completion", [5], "/completion sent no token ids"),
    ("llama-server", "/completion", {"tokens": ["five"]}, _malformed("POST /completion")),
    ("llama-server", "/completion", {"tokens": [5], "completion_probabilities": [5]}, _malformed("POST /completion")),
    ("llama-server", "/completion", {"tokens": [5], "completion_probabilities": [{"id": 5, "logprob": "low"}]},
     _malformed("POST /completion")),
    ("llama-server", "/completion", {"tokens": [5], "timings": "fast"}, _malformed("POST /completion")),
    ("llama-server", "/completion", {"tokens": [5], "timings": {"prompt_n": "all"}}, _malformed("POST /completion")),
    ("llama-server", "/completion", {"tokens": [5], "timings": {"prompt_n": 1e400}}, _malformed("POST /completion")),
    ("sglang", "/generate", {"meta_info": [1]}, "/generate sent no output_token_logprobs"),
    ("sglang", "/generate", {"meta_info": {"output_token_logprobs": [[-0.1]]}}, _malformed("POST /generate")),
    ("sglang", "/generate", {"meta_info": {"output_token_logprobs": [[-0.1, "five", "a"]]}},
     _malformed("POST /generate")),
    ("sglang", "/generate", {"meta_info": {"output_token_logprobs": [["low", 5, "a"]]}},
     _malformed("POST /generate")),
    ("sglang", "/generate", {"meta_info": {"output_token_logprobs": [-0.1]}}, _malformed("POST /generate")),
    ("sglang", "/generate", {"meta_info": {"output_token_logprobs": [[-0.1, 5, "a"]], "finish_reason": "stop"}},
     _malformed("POST /generate")),
    ("sglang", "/generate", {"meta_info": {"output_token_logprobs": [[-0.1, 5, "a"]], "cached_tokens": "all"}},
     _malformed("POST /generate")),
    ("sglang", "/generate", {"meta_info": {"output_token_logprobs": [[-0.1, 5, "a"]], "cached_tokens": 1e400}},
     _malformed("POST /generate")),
])
def test_a_native_reply_of_another_shape_is_one_clear_error(serve, kind, route, reply, expected):
    """exact_token_ids (RL rollouts) reads llama-server's /completion and SGLang's /generate whole."""
    server = serve(kind)
    engine = OpenAIEngine(server.url, max_retries=1, exact_token_ids=True)
    assert engine.server_kind == kind
    good = server.routes[route]
    server.routes[route] = reply
    with pytest.raises(EngineConnectionError, match=expected):
        engine.generate([1, 2], sampling=SamplingParams(max_tokens=4, logprobs=True))
    server.routes[route] = good
    done = engine.generate([1, 2], sampling=SamplingParams(max_tokens=4, logprobs=True))
    assert done.token_ids == [5] and done.logprobs == [pytest.approx(-0.1)]


@pytest.mark.parametrize("reply", [[{"id": "m"}], {"data": "m"}, {"data": [["m", "/folder"]]}])
def test_a_vllm_model_list_of_another_shape_is_a_rollout_server_error(serve, tmp_path, reply):
    from venus_edge.train.errors import RolloutServerError
    from venus_edge.train.rollout_servers import RolloutServer

    server = serve("openai", **{"/v1/models": reply})
    config = SimpleNamespace(rollout_server="vllm", rollout_server_url=server.url)
    with pytest.raises(RolloutServerError, match=r"the vLLM server at .* did not list its model: \w+Error"):
        RolloutServer(config, tmp_path)._check_vllm_serves(Path(tmp_path))


@pytest.mark.parametrize(("reply", "expected"), [
    (Raw('{"choices": [{"text": "hello world"}]}', "application/json"),  # a server that ignores stream: true
     r"POST /v1/completions answered with one JSON reply, not the event stream it was asked for: \{\"choices"),
    (Raw('data: {"choices": [{"text": "hel", "logprobs": {"tokens": ["token_id:5"]}}]}\n\n'),  # no [DONE]
     r"POST /v1/completions: the stream ended without \[DONE\] \(cut off by the server or a proxy\)"),
    (Raw("data: " + "[" * 100_000 + "]" * 100_000 + "\n\n"), "POST /v1/completions streamed JSON nested too deeply"),
])
def test_a_completion_that_is_not_a_whole_stream_is_an_error_not_an_empty_answer(serve, reply, expected):
    server = serve("openai")
    engine = OpenAIEngine(server.url, max_retries=1)
    server.routes["/v1/completions"] = reply
    with pytest.raises(EngineConnectionError, match=expected):
        engine.generate([1, 2], sampling=SamplingParams(max_tokens=4))


def test_a_reply_nested_too_deeply_is_non_json(serve):
    server = serve("openai", **{"/v1/models": Raw("[" * 100_000 + "]" * 100_000, "application/json")})
    with pytest.raises(EngineConnectionError, match="GET /v1/models answered with non-JSON"):
        OpenAIEngine(server.url, max_retries=1)


@pytest.mark.parametrize("retry_after", ["\u00b2", "nan", "-5", "inf", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_a_retry_after_that_is_not_a_number_of_seconds_is_not_waited_on(serve, retry_after):
    """Retry-After is honoured as seconds (at most ``MAX_RETRY_AFTER_S``); anything else: the engine's own back-off."""
    busy = Raw('{"error": "busy"}', "application/json", status=503, headers={"Retry-After": retry_after})
    server = serve("openai", **{"/v1/models": busy})
    with pytest.raises(EngineConnectionError, match=r"no answer after 2 attempt\(s\) \(HTTP 503\)"):
        OpenAIEngine(server.url, max_retries=2, backoff_s=0.01)
    assert server.requests["/v1/models"] == 2


def test_a_long_retry_after_is_capped():
    import httpx

    from venus_edge.engines.openai import MAX_RETRY_AFTER_S, _retry_after_s

    def answer(seconds: str) -> float:
        return _retry_after_s(httpx.Response(503, headers={"Retry-After": seconds}))

    assert answer("86400") == answer("1" * 30) == MAX_RETRY_AFTER_S and answer("2.5") == 2.5 and answer("") == 0.0
