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


class StubServer:
    """Answers each route from ``routes`` (mutable): a JSON value, a list of events for a streamed route (sent as
    ``data:`` lines, then ``[DONE]``), or ``NOT_FOUND``."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                reply = routes.get(self.path, NOT_FOUND)
                if reply is NOT_FOUND:
                    status, body, kind = 404, b'{"error": "not found"}', "application/json"
                elif self.path == "/v1/completions":
                    status, kind = 200, "text/event-stream"
                    body = "".join(f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n"
                                   for event in [*reply, "[DONE]"]).encode()
                else:
                    status, body, kind = 200, json.dumps(reply).encode(), "application/json"
                self.send_response(status)
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


def test_a_detokenize_reply_of_another_shape_is_one_clear_error(serve):
    server = serve("openai", **{"/detokenize": ["a"]})
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
