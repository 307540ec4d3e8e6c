"""``OpenAIEngine``: the agent loop against a model server that speaks the OpenAI completions API (llama.cpp's
``llama-server``, vLLM, SGLang), for users who outgrow one machine.

Token in, token out: the prompt goes to ``POST /v1/completions`` as token ids, streamed back with
``logprobs``, from which the generated token ids and their log-probabilities are read (llama-server writes them
as ``logprobs.content[i].id``; vLLM, with ``return_tokens_as_token_ids``, as ``"token_id:N"`` strings). Text is
tokenized and detokenized by the server (``POST /tokenize`` and ``/detokenize``, whose request and reply fields
differ between llama-server and vLLM; both are sent and read), so the ids are the model's own. The window comes
from ``GET /props`` (llama-server) or ``GET /v1/models`` (``max_model_len``, vLLM).

The same semantics as ``LlamaCppEngine``:

- stops are decided here, on the stream (``Engine``'s rule: a stop string the vocabulary holds as one token stops
  on that token's id, others on the text where ``stop_text_if`` accepts it); the request is then closed, which
  makes the server stop decoding. No ``stop`` is sent: servers match stop strings as text, which would cut
  reasoning that mentions ``<tool_response>``;
- the prefix the server keeps in its KV cache is reported as reused (``cache_prompt`` with llama-server, whose
  ``timings.prompt_n`` counts the tokens it evaluated; ``usage.prompt_tokens_details.cached_tokens`` elsewhere);
- the presence penalty covers the turn (``repeat_last_n`` = ``max_tokens``; vLLM penalizes every output token);
- a grammar is sent as llama-server's ``grammar`` (GBNF); other servers ignore it.

Failures: a request that gets no answer, HTTP 429 or a 5xx is retried with exponential back-off (``Retry-After``
honoured in seconds, up to ``MAX_RETRY_AFTER_S``) up to ``max_retries`` times; a stream that breaks off after it
started, or ends without ``[DONE]``, is not retried (the server may have changed its cache). Either raises
``EngineConnectionError``, as does a reply this engine cannot read (a field missing or of another type, one JSON
reply where a stream was asked for: a server of another kind or version behind the URL).

Usage::

    engine = OpenAIEngine("http://127.0.0.1:8080")          # llama-server -m model.gguf --port 8080
    agent = Agent(engine, default_tools(["docs/"], completer=engine))
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import httpx

from venus_edge.engines.base import (
    Completion,
    FinishReason,
    GenerationStats,
    SamplingParams,
    StopStream,
    StopTextRule,
    TokenCallback,
    room_left,
)
from venus_edge.errors import EngineConnectionError, EngineStateError
from venus_edge.protocol import render_chat_parts, tokenize_message

__all__ = ["OpenAIEngine"]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: The longest wait a ``Retry-After`` header gets, in seconds (a server asking for a day is not waited on for a day).
MAX_RETRY_AFTER_S = 60.0
#: what reading a reply of another shape raises: a missing key, a short list, text where a number goes, a list
#: where an object goes, a number too large for an int (JSON's 1e400 reads as infinity), JSON nested too deeply
_MALFORMED = (AttributeError, IndexError, KeyError, TypeError, ValueError, OverflowError, RecursionError)
# The Qwen vocabulary's <|im_start|>: its tokenizer NFC-normalizes text, and llama.cpp's does not (TEST_MODELS.md).
_QWEN_IM_START = 151644


class OpenAIEngine:
    """An ``Engine`` over an OpenAI-compatible completions server.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8080`` (a trailing ``/v1`` is accepted).
        model: the model name sent with each request (default: the server's first model).
        api_key: sent as a bearer token.
        n_ctx: the context window in tokens (default: what the server reports).
        timeout_s: read timeout of a request, in seconds (a long prefill sends nothing for a while).
        connect_timeout_s: seconds to open a connection.
        max_retries: attempts of a request that fails with no answer, 429 or a 5xx.
        backoff_s: the first wait between attempts, in seconds; it doubles up to ``max_backoff_s``.
        client: an ``httpx.Client`` to use (tests, proxies); the engine makes its own otherwise.
        exact_token_ids: for RL rollouts, request each completion whole from the server's native interface, which
            lists every sampled id: llama-server's ``/completion`` with ``return_tokens`` (its streamed and
            OpenAI-form replies leave out the ids and log-probs of tokens that end inside a UTF-8 character), or
            SGLang's ``/generate`` with ``input_ids`` and ``return_logprob`` (its OpenAI-form replies name tokens by
            text). Stops are then cut from the finished completion (single-token stop strings only), text is not
            streamed, a cancel is not seen until the completion returns, and ``logprobs`` are NaN for the tokens the
            server sent none for. vLLM needs none of this: its streamed ``return_tokens_as_token_ids`` lists every id.

    Attributes:
        server_kind: ``llama-server`` (it answers ``/props``), ``sglang`` (it answers ``/get_model_info``) or
            ``openai`` (vLLM, others).

    Raises:
        EngineConnectionError: the server cannot be reached or does not say its context window.
    """

    #: Requests may run at the same time (the server batches them when it has the slots):
    #: ``Engine.concurrent_rollouts``.
    concurrent_rollouts = True

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        n_ctx: int | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        client: httpx.Client | None = None,
        exact_token_ids: bool = False,
    ) -> None:
        if max_retries < 1:
            raise ValueError(f"max_retries must be >= 1, got {max_retries}")
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.max_retries, self.backoff_s, self.max_backoff_s = max_retries, backoff_s, max_backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
                                              headers=headers, trust_env=False)
        self._owns_client = client is None
        self._closed = False
        self.exact_token_ids = exact_token_ids
        self.model, server_n_ctx = self._discover(model)
        self._n_ctx = n_ctx or server_n_ctx
        if not self._n_ctx:
            raise EngineConnectionError(self.base_url, "the server reports no context window; pass n_ctx")
        self._tokens: dict[tuple[str, bool], list[int]] = {}
        self._nfc = self._tokenize_raw("<|im_start|>", True) == [_QWEN_IM_START]

    # ------------------------------------------------------------------------------------------ tokens
    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        """The server's token ids of ``text`` (NFC first for Qwen vocabularies, as ``LlamaCppEngine``)."""
        if self._nfc:
            text = unicodedata.normalize("NFC", text)
        key = (text, parse_special)
        if key not in self._tokens:
            self._tokens[key] = self._tokenize_raw(text, parse_special)
        return list(self._tokens[key])

    def detokenize(self, token_ids: Sequence[int]) -> str:
        reply = self._request("POST", "/detokenize", {"tokens": list(token_ids), "model": self.model})
        with self._reading("POST /detokenize"):
            return _text(reply.get("content", reply.get("prompt", "")))

    def single_token_id(self, text: str) -> int | None:
        """The id of the one token that spells ``text`` in this vocabulary (``<tool_response>`` in Qwen's), or None."""
        if not (text.startswith("<") and text.endswith(">")):  # only tags are added tokens
            return None
        ids = self.tokenize(text)
        return ids[0] if len(ids) == 1 else None

    def _tokenize_raw(self, text: str, parse_special: bool) -> list[int]:
        body = {"content": text, "prompt": text, "add_special": False, "add_special_tokens": False,
                "parse_special": parse_special, "model": self.model}
        reply = self._request("POST", "/tokenize", body)
        with self._reading("POST /tokenize"):
            return [int(t["id"]) if isinstance(t, dict) else int(t) for t in reply.get("tokens", [])]

    # ------------------------------------------------------------------------------------------ generate
    def generate(
        self,
        prompt_ids: Sequence[int],
        *,
        sampling: SamplingParams = SamplingParams(),
        stop: Sequence[str] = (),
        stop_text_if: StopTextRule | None = None,
        grammar: str | None = None,
        on_text: TokenCallback | None = None,
        seed: int | None = None,
    ) -> Completion:
        """Generate a continuation of ``prompt_ids`` on the server (see ``Engine`` and the module docstring).

        Raises:
            ContextOverflowError: the prompt leaves no room for a single new token.
            EngineConnectionError: the server failed (after retries), or the stream broke off.
        """
        self._check_open()
        prompt = list(prompt_ids)
        max_tokens = min(sampling.max_tokens, room_left(len(prompt), self._n_ctx))
        if self.exact_token_ids:
            return self._generate_whole(prompt, max_tokens, sampling, stop, grammar, on_text, seed)
        body: dict[str, Any] = {
            "model": self.model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k, "min_p": 0.0,
            "presence_penalty": sampling.presence_penalty, "repeat_penalty": 1.0, "repeat_last_n": max_tokens,
            "logprobs": 1, "return_tokens_as_token_ids": True, "cache_prompt": True,
            "stream_options": {"include_usage": True},
        }
        if seed is not None:
            body["seed"] = seed
        if grammar:
            body["grammar"] = grammar
        stop_ids = {token: text for text in stop if (token := self.single_token_id(text)) is not None}
        stream = StopStream([text for text in stop if text not in stop_ids.values()], on_text, stop_text_if)
        token_ids: list[int] = []
        logprobs: list[float] = []
        finish: FinishReason = "length"
        report: dict[str, Any] = {}
        ending: tuple[int, float] | None = None  # the end-of-generation or stop token, not part of the completion
        textless: list[tuple[int, float]] = []  # tokens with no text yet: the end-of-generation one if none follows
        start = first = time.perf_counter()
        for chunk in self._stream("/v1/completions", body):
            with self._reading("POST /v1/completions"):
                report.update({key: chunk[key] for key in ("timings", "usage") if chunk.get(key)})
                choice = (chunk.get("choices") or [{}])[0]
                pieces = _token_pieces(choice)
                text, choice_finish = _text(choice.get("text") or ""), choice.get("finish_reason")
            if pieces and first == start:
                first = time.perf_counter()
            for token, logprob, has_text in pieces:
                if token in stop_ids:
                    ending, finish, stream.stop_hit = (token, logprob), "stop", stop_ids[token]
                    break
                if not has_text:
                    textless.append((token, logprob))
                    continue
                token_ids += [t for t, _ in textless] + [token]
                logprobs += [value for _, value in textless] + [logprob]
                textless = []
            if finish == "stop":
                break
            if stream.feed(text):
                finish = stream.finish_reason
                break
            if choice_finish == "stop":
                finish = "eog"
        if finish == "eog" and textless:
            ending = textless.pop()
        token_ids += [t for t, _ in textless]
        logprobs += [value for _, value in textless]
        if finish != "stop" or stream.stop_hit in stop_ids.values():
            stream.flush()
        if stream.cancelled:  # also when the cancel came with the final flush
            finish = "cancelled"
        end = time.perf_counter()
        with self._reading("POST /v1/completions"):
            evaluated = _evaluated(report, len(prompt))
        stats = GenerationStats(len(prompt), evaluated, len(prompt) - evaluated,
                                len(token_ids) + (finish == "eog"), first - start, end - first)
        if finish not in ("eog", "stop") or (finish == "stop" and stream.stop_hit not in stop_ids.values()):
            ending = None
        return Completion(stream.text, token_ids, finish, stream.stop_hit, stats,
                          logprobs if sampling.logprobs else None, ending[0] if ending else None,
                          ending[1] if ending and sampling.logprobs else None)

    def _generate_whole(self, prompt: list[int], max_tokens: int, sampling: SamplingParams, stop: Sequence[str],
                        grammar: str | None, on_text: TokenCallback | None, seed: int | None) -> Completion:
        """One completion from the server's native interface (llama-server's ``/completion``, SGLang's
        ``/generate``), not streamed, with every sampled id."""
        stop_ids = {token: text for text in stop if (token := self.single_token_id(text)) is not None}
        if text_stops := [text for text in stop if text not in stop_ids.values()]:
            raise ValueError(f"exact_token_ids stops on single tokens only; {text_stops} is text in this vocabulary")
        start = time.perf_counter()
        if self.server_kind == "sglang":
            sampled, logprobs, ended, prompt_s, evaluated = self._sample_sglang(prompt, max_tokens, sampling, stop_ids,
                                                                                seed)
        else:
            sampled, logprobs, ended, prompt_s, evaluated = self._sample_llama_server(prompt, max_tokens, sampling,
                                                                                      grammar, seed)
        end = time.perf_counter()
        cut = next((i for i, token in enumerate(sampled) if token in stop_ids), None)
        finish: FinishReason = "stop" if cut is not None else "eog" if ended else "length"
        kept = sampled[:cut] if cut is not None else sampled[:-1] if ended else sampled
        end_index = cut if cut is not None else len(sampled) - 1 if ended else None
        stream = StopStream([], on_text, None)
        stream.feed(self.detokenize(kept) if kept else "")
        stream.flush()
        stats = GenerationStats(len(prompt), evaluated, len(prompt) - evaluated, len(sampled), prompt_s,
                                end - start - prompt_s)
        return Completion(stream.text, kept, "cancelled" if stream.cancelled else finish,
                          stop_ids[sampled[cut]] if cut is not None else None, stats,
                          logprobs[:len(kept)] if logprobs is not None else None,
                          sampled[end_index] if end_index is not None else None,
                          logprobs[end_index] if logprobs is not None and end_index is not None else None)

    def _sample_llama_server(self, prompt: list[int], max_tokens: int, sampling: SamplingParams, grammar: str | None,
                             seed: int | None) -> tuple[list[int], list[float] | None, bool, float, int]:
        """(sampled ids, their log-probs, whether the last one ended generation, prefill seconds, prompt tokens
        evaluated) from llama-server's ``/completion`` (``return_tokens``, ``n_probs``)."""
        body: dict[str, Any] = {
            "prompt": prompt, "n_predict": max_tokens, "stream": False, "temperature": sampling.temperature,
            "top_p": sampling.top_p, "top_k": sampling.top_k, "min_p": 0.0,
            "presence_penalty": sampling.presence_penalty,
            "repeat_penalty": 1.0, "repeat_last_n": max_tokens, "cache_prompt": True, "return_tokens": True,
            "n_probs": 1 if sampling.logprobs else 0,
        }
        if seed is not None:
            body["seed"] = seed
        if grammar:
            body["grammar"] = grammar
        reply = self._request("POST", "/completion", body)
        if not isinstance(reply, dict) or not isinstance(reply.get("tokens"), list):
            raise EngineConnectionError(self.base_url, "/completion sent no token ids: exact_token_ids needs "
                                        "llama-server (return_tokens)")
        with self._reading("POST /completion"):
            return self._read_llama_server(reply, sampling.logprobs, len(prompt))

    @staticmethod
    def _read_llama_server(reply: Mapping[str, Any], with_logprobs: bool,
                           prompt_tokens: int) -> tuple[list[int], list[float] | None, bool, float, int]:
        sampled = [int(token) for token in reply["tokens"]]
        probabilities = reply.get("completion_probabilities") or []
        logprobs: list[float] | None = None
        if with_logprobs:  # the entries are the sampled tokens in order, less those the server left out
            logprobs, entry = [], 0
            for token in sampled:
                found = entry < len(probabilities) and int(probabilities[entry].get("id", -1)) == token
                logprobs.append(float(probabilities[entry].get("logprob", math.nan)) if found else math.nan)
                entry += found
        timings = reply.get("timings") or {}
        ended = reply.get("stop_type") == "eos" and bool(sampled)
        return (sampled, logprobs, ended, float(timings.get("prompt_ms", 0.0)) / 1000,
                int(timings.get("prompt_n", prompt_tokens)))

    def _sample_sglang(self, prompt: list[int], max_tokens: int, sampling: SamplingParams, stop_ids: Mapping[int, str],
                       seed: int | None) -> tuple[list[int], list[float] | None, bool, float, int]:
        """(sampled ids, their log-probs, whether the last one ended generation, prefill seconds, prompt tokens
        evaluated) from SGLang's native ``/generate`` (``input_ids``, ``return_logprob``; its ``meta_info`` lists
        ``[logprob, id, text]`` per output token and the ``finish_reason``). The server stops on the stop ids."""
        sampling_params: dict[str, Any] = {
            "max_new_tokens": max_tokens, "temperature": sampling.temperature, "top_p": sampling.top_p,
            "top_k": sampling.top_k if sampling.top_k > 0 else -1, "min_p": 0.0,
            "presence_penalty": sampling.presence_penalty, "stop_token_ids": sorted(stop_ids),
            "skip_special_tokens": False, "no_stop_trim": True,
        }
        if seed is not None:
            sampling_params["sampling_seed"] = seed
        body = {"input_ids": prompt, "sampling_params": sampling_params, "return_logprob": True, "stream": False}
        reply = self._request("POST", "/generate", body)
        info = reply.get("meta_info") if isinstance(reply, dict) else None
        entries = info.get("output_token_logprobs") if isinstance(info, dict) else None
        if not isinstance(entries, list):
            raise EngineConnectionError(self.base_url, "/generate sent no output_token_logprobs: exact_token_ids "
                                        "needs SGLang's native /generate with return_logprob")
        assert info is not None  # entries came from it
        with self._reading("POST /generate"):
            return self._read_sglang(info, entries, stop_ids, sampling.logprobs, len(prompt))

    @staticmethod
    def _read_sglang(info: Mapping[str, Any], entries: list[Any], stop_ids: Mapping[int, str], with_logprobs: bool,
                     prompt_tokens: int) -> tuple[list[int], list[float] | None, bool, float, int]:
        sampled = [int(entry[1]) for entry in entries]
        logprobs = [math.nan if entry[0] is None else float(entry[0]) for entry in entries]
        reason = info.get("finish_reason") or {}
        # a stop on a stop id ends with that id (a stop, not an end of generation); the end of generation too
        ended = (reason.get("type") == "stop" and bool(sampled) and sampled[-1] == reason.get("matched")
                 and sampled[-1] not in stop_ids)
        evaluated = prompt_tokens - int(info.get("cached_tokens") or 0)
        return sampled, logprobs if with_logprobs else None, ended, 0.0, evaluated

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        """Complete a short chat greedily (``TextCompleter``: visit's evidence, a judge); a reasoning block, if the
        model writes one, is removed. Page text in the messages cannot inject control tokens."""
        thinking = self._nfc
        ids = [token for head, content, tail in render_chat_parts(messages, open_reasoning=thinking)
               for token in tokenize_message(self.tokenize, head, content, tail)]
        sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=max_tokens)
        text = self.generate(ids, sampling=sampling).text
        return text.split("</think>")[-1].strip() if thinking or "</think>" in text else text.strip()

    def model_info(self) -> dict[str, Any]:
        return {"name": self.model, "server": self.base_url, "n_ctx": self._n_ctx}

    def close(self) -> None:
        """Close the HTTP client if the engine made it. Further calls raise ``EngineStateError``."""
        if self._owns_client and not self._closed:
            self._client.close()
        self._closed = True

    def __enter__(self) -> OpenAIEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ HTTP
    def _discover(self, model: str | None) -> tuple[str, int]:
        """(model name, context window) from ``/props`` (llama-server) or ``/v1/models`` (vLLM, SGLang); the server's
        kind from which of ``/props`` and ``/get_model_info`` it answers."""
        n_ctx = 0
        self.server_kind = "openai"
        try:
            props = self._request("GET", "/props", None)
            self.server_kind = "llama-server"
            with self._reading("GET /props"):
                settings = props.get("default_generation_settings", {})
                n_ctx = int(props.get("n_ctx") or settings.get("n_ctx") or 0)
        except EngineConnectionError as exc:
            if "HTTP 404" not in str(exc):
                raise
            with contextlib.suppress(EngineConnectionError):  # SGLang's native interface; vLLM answers 404
                info = self._request("GET", "/get_model_info", None)
                if isinstance(info, dict) and "model_path" in info:
                    self.server_kind = "sglang"
        reply = self._request("GET", "/v1/models", None)
        with self._reading("GET /v1/models"):
            models = reply.get("data", [])
            name = model or (str(models[0].get("id")) if models else "default")
            listed: dict[str, Any] = next((m for m in models if m.get("id") == name), {})
            return name, n_ctx or int(listed.get("max_model_len") or listed.get("meta", {}).get("n_ctx_train") or 0)

    def _request(self, method: str, path: str, body: Any) -> Any:
        self._check_open()
        response = self._with_retries(lambda: self._client.request(method, self.base_url + path, json=body))
        try:
            return response.json()
        except (ValueError, RecursionError):
            raise EngineConnectionError(self.base_url, f"{method} {path} answered with non-JSON") from None

    def _stream(self, path: str, body: Any) -> Iterator[dict[str, Any]]:
        """The ``data:`` events of a streamed request; closing the iterator closes the request (the server stops)."""
        request = self._client.build_request("POST", self.base_url + path, json=body)
        response = self._with_retries(lambda: self._client.send(request, stream=True))
        try:
            if response.headers.get("content-type", "").startswith("application/json"):  # stream: true ignored
                response.read()
                raise EngineConnectionError(self.base_url, f"POST {path} answered with one JSON reply, not the event "
                                                           f"stream it was asked for: {response.text[:200]}")
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if not isinstance(event, dict):
                    raise EngineConnectionError(self.base_url, f"POST {path} streamed an event that is not a JSON "
                                                f"object: {data[:200]}")
                if "error" in event:
                    raise EngineConnectionError(self.base_url, f"the server reported: {event['error']}")
                yield event
            # every server this reads ends a whole stream with [DONE]: a stream without it was cut off
            raise EngineConnectionError(self.base_url, f"POST {path}: the stream ended without [DONE] (cut off by "
                                                       "the server or a proxy)")
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            raise EngineConnectionError(self.base_url, f"the stream broke off ({type(exc).__name__}: {exc})") from exc
        except RecursionError:
            raise EngineConnectionError(self.base_url, f"POST {path} streamed JSON nested too deeply to read") from None
        finally:
            response.close()

    def _with_retries(self, send: Callable[[], httpx.Response]) -> httpx.Response:
        """``send()`` until it answers with a status that is not retried, backing off exponentially."""
        wait = self.backoff_s
        problem = ""
        for attempt in range(self.max_retries):
            if attempt:
                time.sleep(wait)
                wait = min(self.max_backoff_s, wait * 2)
            try:
                response = send()
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in RETRY_STATUSES:
                problem = f"HTTP {response.status_code}"
                wait = max(wait, _retry_after_s(response))
                response.close()
                continue
            if response.status_code >= 400:
                response.read()
                raise EngineConnectionError(self.base_url, f"HTTP {response.status_code}: {response.text[:300]}")
            return response
        raise EngineConnectionError(self.base_url, f"no answer after {self.max_retries} attempt(s) ({problem})")

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Read a reply of ``what`` (``"POST /tokenize"``): a shape this engine cannot read raises one
        ``EngineConnectionError`` naming the request, not the ``KeyError`` or ``TypeError`` of the line that read it."""
        try:
            yield
        except _MALFORMED as exc:
            raise EngineConnectionError(self.base_url, f"{what} answered in a form this engine cannot read "
                                        f"({type(exc).__name__}: {exc})") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise EngineStateError(f"engine for {self.base_url} is closed; create a new OpenAIEngine")


def _token_pieces(choice: Mapping[str, Any]) -> list[tuple[int, float, bool]]:
    """(token id, log-probability, whether it has text) of each token in a streamed choice, in llama-server's or
    vLLM's logprobs form. llama-server sends the end-of-generation token with no bytes (as it does a control token
    that renders as nothing; ``generate`` tells them apart by whether a token follows)."""
    logprobs = choice.get("logprobs") or {}
    if isinstance(logprobs.get("content"), list):  # llama-server: [{"id": 5, "bytes": [...], "logprob": -0.1}]
        return [(int(entry["id"]), float(entry.get("logprob", 0.0)), entry.get("bytes") != [])
                for entry in logprobs["content"]]
    tokens = logprobs.get("tokens") or []  # vLLM with return_tokens_as_token_ids: ["token_id:5"]
    values = logprobs.get("token_logprobs") or [0.0] * len(tokens)
    return [(int(str(token).rsplit(":", 1)[-1]), float(value or 0.0), True)
            for token, value in zip(tokens, values, strict=True)]


def _evaluated(report: Mapping[str, Any], prompt_tokens: int) -> int:
    """Prompt tokens the server evaluated (the rest came from its KV cache), from its timings or usage."""
    timings = report.get("timings") or {}
    if "prompt_n" in timings:
        return int(timings["prompt_n"])
    details = (report.get("usage") or {}).get("prompt_tokens_details") or {}
    return prompt_tokens - int(details.get("cached_tokens") or 0)


def _retry_after_s(response: httpx.Response) -> float:
    """The seconds a ``Retry-After: N`` header asks for, at most ``MAX_RETRY_AFTER_S``; 0 for none, an HTTP date
    or anything else that is not a number of seconds."""
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return 0.0
    return min(seconds, MAX_RETRY_AFTER_S) if math.isfinite(seconds) and seconds >= 0 else 0.0


def _text(value: Any) -> str:
    """A text field of a reply; another type is a reply this engine cannot read (``_reading``)."""
    if not isinstance(value, str):
        raise TypeError(f"text expected, got {type(value).__name__} {str(value)[:80]}")
    return value
