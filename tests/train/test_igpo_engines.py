"""IGPO rollouts on vLLM and SGLang (``train.rollout_servers``), against stub servers on 127.0.0.1 that speak the
engines' documented interfaces: vLLM's streamed ``/v1/completions`` with ``return_tokens_as_token_ids``, its
``/collective_rpc`` ``reload_weights`` and ``/reset_prefix_cache``; SGLang's native ``/generate`` with ``input_ids``
and ``return_logprob`` and its ``/update_weights_from_disk``. A stub samples from the checkpoint it was told to load
(transformers, F32), so a rollout's log-probs equal the policy's only if the weight update really reached it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from venus_edge.cli import main as cli  # noqa: E402
from venus_edge.engines.base import SamplingParams  # noqa: E402
from venus_edge.train.hf_engine import TransformersEngine  # noqa: E402

#: The server's log-probs against the policy's recomputed ones: F32 on both sides, a KV cache on one (~1e-6 apart).
SAME_WEIGHTS = 1e-4


class StubEngineServer:
    """A vLLM or SGLang stand-in on 127.0.0.1 (``http.server`` in a thread) that samples with transformers from the
    checkpoint it loaded: at start from ``root``; on ``/collective_rpc reload_weights`` (vLLM) from ``root`` again;
    on ``/update_weights_from_disk`` (SGLang) from the ``model_path`` given. ``fail_update`` (1-based) makes that
    weight update fail as the engine reports a failure (vLLM: HTTP 500; SGLang: HTTP 400 with success false).

    Attributes:
        updates: ``(path, body)`` of every weight-update and cache call, in order.
        loaded: every folder loaded, the start included.
    """

    def __init__(self, kind: str, root: Path, *, fail_update: int | None = None, n_ctx: int = 2048,
                 port: int = 0) -> None:
        self.kind, self.root, self.n_ctx, self.fail_update = kind, root, n_ctx, fail_update
        self.updates: list[tuple[str, Any]] = []
        self.loaded: list[Path] = []
        self.lock = threading.Lock()
        self._load(root)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                stub.get(self)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
                stub.post(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _load(self, folder: Path) -> None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        with self.lock:
            self.engine = TransformersEngine(model, tokenizer, n_ctx=self.n_ctx)
            self.loaded.append(folder)

    # ------------------------------------------------------------------------------------------ routes
    def get(self, request: BaseHTTPRequestHandler) -> None:
        if request.path == "/health":
            _reply(request, 200, {})
        elif request.path == "/v1/models":
            _reply(request, 200, {"object": "list", "data": [
                {"id": "policy", "object": "model", "root": str(self.root), "max_model_len": self.n_ctx}]})
        elif request.path == "/get_model_info" and self.kind == "sglang":
            _reply(request, 200, {"model_path": str(self.loaded[-1]), "is_generation": True})
        else:  # /props is llama-server's
            _reply(request, 404, {"detail": "Not Found"})

    def post(self, request: BaseHTTPRequestHandler, body: Any) -> None:
        route = {"/tokenize": self.tokenize, "/detokenize": self.detokenize}
        if self.kind == "vllm":
            route |= {"/v1/completions": self.completions, "/collective_rpc": self.collective_rpc,
                      "/reset_prefix_cache": self.reset_prefix_cache}
        else:
            route |= {"/generate": self.generate, "/update_weights_from_disk": self.update_weights_from_disk}
        handler = route.get(request.path.split("?")[0])
        if handler is None:
            _reply(request, 404, {"detail": "Not Found"})
        else:
            handler(request, body)

    def tokenize(self, request: BaseHTTPRequestHandler, body: Any) -> None:
        tokens = self.engine.tokenize(body["prompt"])
        _reply(request, 200, {"tokens": tokens, "count": len(tokens), "max_model_len": self.n_ctx})

    def detokenize(self, request: BaseHTTPRequestHandler, body: Any) -> None:
        _reply(request, 200, {"prompt": self.engine.detokenize(body["tokens"])})

    def _sample(self, prompt: list[int], settings: dict[str, Any], max_tokens: int, stop_ids: list[int],
                seed: int | None) -> tuple[list[int], list[float], str]:
        """(ids, log-probs, finish) of one completion, the token that ended it included."""
        sampling = SamplingParams(temperature=settings["temperature"], top_p=settings["top_p"],
                                  top_k=max(0, settings["top_k"]), presence_penalty=settings["presence_penalty"],
                                  max_tokens=max_tokens, logprobs=True)
        with self.lock:
            stops = [self.engine.tokenizer.convert_ids_to_tokens(token) for token in stop_ids]
            completion = self.engine.generate(prompt, sampling=sampling, stop=stops, seed=seed)
        ids, logprobs = list(completion.token_ids), list(completion.logprobs or [])
        if completion.end_token is not None:
            ids.append(completion.end_token)
            logprobs.append(float(completion.end_logprob or 0.0))
        return ids, logprobs, "length" if completion.finish_reason == "length" else "stop"

    def completions(self, request: BaseHTTPRequestHandler, body: Any) -> None:
        """vLLM's streamed ``/v1/completions``: one event per token, named ``token_id:N`` (the end-of-generation
        token too, with no text), then the usage and ``[DONE]``."""
        assert body["stream"] and body["return_tokens_as_token_ids"] and body["logprobs"] == 1, body
        ids, logprobs, finish = self._sample(body["prompt"], body, body["max_tokens"], [], body.get("seed"))
        request.send_response(200)
        request.send_header("Content-Type", "text/event-stream")
        request.send_header("Connection", "close")
        request.end_headers()
        text = ""
        try:
            for index, (token, logprob) in enumerate(zip(ids, logprobs)):
                ending = token in self.engine._end_ids
                decoded = text if ending else self.engine.detokenize(ids[:index + 1])
                choice = {"index": 0, "text": decoded[len(text):], "finish_reason": finish if index == len(ids) - 1
                          else None, "logprobs": {"tokens": [f"token_id:{token}"], "token_logprobs": [logprob]}}
                text = decoded
                _event(request, {"id": "cmpl-stub", "object": "text_completion", "choices": [choice]})
            _event(request, {"id": "cmpl-stub", "choices": [], "usage": {
                "prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}})
            request.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading at a stop token
            pass
        request.close_connection = True

    def generate(self, request: BaseHTTPRequestHandler, body: Any) -> None:
        """SGLang's native ``/generate`` on ``input_ids``: ``meta_info.output_token_logprobs`` holds
        ``[logprob, id, None]`` per output token (the matched stop or end token included)."""
        settings = body["sampling_params"]
        assert body["return_logprob"] and not body["stream"], body
        ids, logprobs, finish = self._sample(body["input_ids"], settings, settings["max_new_tokens"],
                                             settings["stop_token_ids"], settings.get("sampling_seed"))
        reason = {"type": "stop", "matched": ids[-1]} if finish == "stop" else {"type": "length",
                                                                                 "length": len(ids)}
        _reply(request, 200, {"text": self.engine.detokenize(ids), "output_ids": ids, "meta_info": {
            "prompt_tokens": len(body["input_ids"]), "completion_tokens": len(ids), "cached_tokens": 0,
            "finish_reason": reason, "output_token_logprobs": [[lp, token, None] for token, lp in zip(ids, logprobs)]}})

    def _updated(self, path: str, body: Any) -> bool:
        """Record a weight update; False if it is the one that fails."""
        self.updates.append((path, body))
        return len(self.updates) != self.fail_update

    def collective_rpc(self, request: BaseHTTPRequestHandler, body: Any) -> None:
        if not self._updated("/collective_rpc", body):
            _reply(request, 500, {"error": "RuntimeError: CUDA out of memory while reloading weights"})
            return
        assert body == {"method": "reload_weights"}, body
        self._load(self.root)
        _reply(request, 200, {"results": [None]})

    def reset_prefix_cache(self, request: BaseHTTPRequestHandler, body: Any) -> None:
        self.updates.append(("/reset_prefix_cache", body))
        _reply(request, 200, None)

    def update_weights_from_disk(self, request: BaseHTTPRequestHandler, body: Any) -> None:
        if not self._updated("/update_weights_from_disk", body):
            _reply(request, 400, {"success": False, "message": "Failed to get weights iterator: no safetensors",
                                  "num_paused_requests": 0})
            return
        self._load(Path(body["model_path"]))
        _reply(request, 200, {"success": True, "message": "Succeeded to update model weights.",
                              "num_paused_requests": 0})


def _reply(request: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    data = b"" if payload is None else json.dumps(payload).encode()
    request.send_response(status)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


def _event(request: BaseHTTPRequestHandler, payload: Any) -> None:
    request.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
    request.wfile.flush()


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def toy(tmp_path_factory, make_toy) -> Path:
    out = tmp_path_factory.mktemp("igpo-engines")
    make_toy(out, people=12, seed=6)
    return out


def _served_folder(run: Path, toy: Path) -> Path:
    """The folder a user starts vLLM on: the policy's (``OUT/rollout-policy/hf``), holding the SFT checkpoint."""
    folder = run / "rollout-policy" / "hf"
    shutil.copytree(toy / "base", folder)
    return folder


def _rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


UPDATES = {"vllm": [("/collective_rpc", {"method": "reload_weights"}), ("/reset_prefix_cache", None)],
           "sglang": [("/update_weights_from_disk", "hf")]}


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_each_step_s_policy_reaches_the_engine_through_its_own_weight_update(toy, igpo_config, tmp_path, kind):
    run = tmp_path / "run"
    folder = _served_folder(run, toy) if kind == "vllm" else toy / "base"
    server = StubEngineServer(kind, folder)
    try:
        # weight decay shrinks the matrices by 10 % a step whatever the rewards: the policy surely changes
        config = igpo_config(toy, run, rollout_server=kind, rollout_server_url=server.url, rollout_concurrency=2,
                             learning_rate=1e-2, weight_decay=10.0)
        assert cli(["train", "igpo", str(config), "--quiet"]) == 0
    finally:
        server.close()
    policy = (run / "rollout-policy" / "hf").resolve()
    expected = [(path, {"model_path": str(policy)} if body == "hf" else body) for path, body in UPDATES[kind]] * 2
    assert server.updates == expected
    assert len(server.loaded) == 3 and all(Path(folder).resolve() == policy for folder in server.loaded[1:])
    rows = _rows(run)
    assert [r["step"] for r in rows] == [1, 2] and all(r["failures"] == 0 and r["trained_tokens"] > 0 for r in rows)
    # token in, token out: the ids the server sampled, with log-probs of the weights the trainer had at each step
    gaps = [r["server_logprob_gap"] for r in rows]
    assert all(gap is not None and gap < SAME_WEIGHTS for gap in gaps), gaps


@pytest.mark.parametrize(("kind", "answer"), [
    ("vllm", "answered POST {url}/collective_rpc with HTTP 500: {{\"error\": \"RuntimeError: CUDA out of memory"),
    ("sglang", "answered POST {url}/update_weights_from_disk with HTTP 400: {{\"success\": false, \"message\": "
               "\"Failed to get weights iterator"),
])
def test_a_failed_weight_update_ends_the_run_with_its_reason_and_a_resumable_checkpoint(toy, igpo_config, tmp_path,
                                                                                       capsys, kind, answer):
    run = tmp_path / "run"
    folder = _served_folder(run, toy) if kind == "vllm" else toy / "base"
    server = StubEngineServer(kind, folder, fail_update=2 if kind == "sglang" else 3)  # the second step's update
    try:
        config = igpo_config(toy, run, rollout_server=kind, rollout_server_url=server.url, rollout_concurrency=2,
                             questions_per_step=1)
        assert cli(["train", "igpo", str(config), "--quiet"]) == 4
    finally:
        server.close()
    err = capsys.readouterr().err
    assert answer.format(url=server.url) in err, err
    assert [r["step"] for r in _rows(run)] == [1] and (run / "checkpoints" / "step-000001").is_dir()
    server = StubEngineServer(kind, folder)
    try:
        config = igpo_config(toy, run, rollout_server=kind, rollout_server_url=server.url, rollout_concurrency=2,
                             questions_per_step=1)
        assert cli(["train", "igpo", str(config), "--quiet"]) == 0
    finally:
        server.close()
    assert [r["step"] for r in _rows(run)] == [1, 2] and (run / "final").is_dir()
    assert len(server.updates) == len(UPDATES[kind]), "the resumed run syncs once, for step 2"


def test_a_running_vllm_must_serve_the_folder_the_policy_is_written_to(toy, igpo_config, tmp_path, capsys):
    server = StubEngineServer("vllm", toy / "base")  # started on the SFT checkpoint: a reload would not see the policy
    try:
        config = igpo_config(toy, tmp_path / "run", rollout_server="vllm", rollout_server_url=server.url)
        assert cli(["train", "igpo", str(config), "--quiet"]) == 4
    finally:
        server.close()
    err = capsys.readouterr().err
    policy = (tmp_path / "run" / "rollout-policy" / "hf").resolve()
    assert f"serves {toy / 'base'}, but reload_weights reloads from the folder a server was started on" in err, err
    assert f"start VLLM_SERVER_DEV_MODE=1 vllm serve {policy}" in err
    assert server.updates == [] and not (tmp_path / "run" / "checkpoints").exists()


def test_a_started_vllm_is_launched_on_the_policy_and_reloaded_after(toy, igpo_config, tmp_path, monkeypatch):
    """The managed path: ``vllm serve`` is run (here a ``vllm`` on PATH that starts the stub) on the policy's folder,
    with the dev-mode routes on; the first step needs no update, the second reloads; the server stops at the end."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "vllm"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n")
    launcher.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    run = tmp_path / "run"
    config = igpo_config(toy, run, rollout_server="vllm", rollout_concurrency=2, questions_per_step=1,
                         rollout_server_args=["--gpu-memory-utilization", "0.3"])
    assert cli(["train", "igpo", str(config), "--quiet"]) == 0
    log = [json.loads(line) for line in (run / "rollout-policy" / "server.log").read_text().splitlines()
           if line.startswith("{")]
    started = log[0]
    assert started["argv"][:2] == ["serve", str(run / "rollout-policy" / "hf")] and started["dev_mode"] == "1"
    assert started["argv"][started["argv"].index("--max-model-len"):][:2] == ["--max-model-len", "2048"]
    assert started["argv"][-2:] == ["--gpu-memory-utilization", "0.3"]
    assert log[1] == {"updates": [["/collective_rpc", {"method": "reload_weights"}],
                                                           ["/reset_prefix_cache", None]]}
    rows = _rows(run)
    assert all(r["failures"] == 0 and r["server_logprob_gap"] < SAME_WEIGHTS for r in rows), rows


def _serve_as_vllm(argv: list[str]) -> None:
    """``vllm serve FOLDER --port N ...`` for the managed test: the stub on that port; at SIGTERM it logs the
    weight updates it received (stdout is the server's log)."""
    import signal

    folder, port = Path(argv[1]), int(argv[argv.index("--port") + 1])
    print(json.dumps({"argv": argv, "dev_mode": os.environ.get("VLLM_SERVER_DEV_MODE")}), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    stub = StubEngineServer("vllm", folder, n_ctx=int(argv[argv.index("--max-model-len") + 1]), port=port)
    done.wait()
    print(json.dumps({"updates": stub.updates}), flush=True)
    stub.close()


if __name__ == "__main__":
    _serve_as_vllm(sys.argv[1:])


def test_two_processes_share_one_server_that_the_main_process_syncs(toy, igpo_config, tmp_path):
    """``accelerate launch`` on 2 CPU processes with an SGLang server: one weight update per step (from the main
    process, not one per process, which would also have two writers of the policy folder), and both processes'
    groups sampled on it."""
    from test_distributed import run as launch

    run = tmp_path / "run"
    server = StubEngineServer("sglang", toy / "base")
    try:
        config = igpo_config(toy, run, rollout_server="sglang", rollout_server_url=server.url, rollout_concurrency=2)
        launch(2, "-m", "venus_edge.train.igpo_trainer", "--quiet", str(config))
    finally:
        server.close()
    policy = (run / "rollout-policy" / "hf").resolve()
    assert server.updates == [("/update_weights_from_disk", {"model_path": str(policy)})] * 2
    rows = _rows(run)
    assert [r["step"] for r in rows] == [1, 2] and all(r["groups"] == 2 and r["failures"] == 0 for r in rows), rows
    assert len((run / "rollouts.jsonl").read_text().splitlines()) == 2 * 2 * 2  # steps x questions x group


def test_a_failed_sync_on_two_processes_stops_both_with_the_reason(toy, igpo_config, tmp_path):
    """The main process's failed weight update reaches the other process as an error (no rank waits for a step
    the other left): the launch fails promptly, each rank's reason named."""
    from test_distributed import _command, _environment

    run = tmp_path / "run"
    server = StubEngineServer("sglang", toy / "base", fail_update=1)
    try:
        config = igpo_config(toy, run, rollout_server="sglang", rollout_server_url=server.url)
        done = subprocess.run(_command(2, ["-m", "venus_edge.train.igpo_trainer", "--quiet", str(config)]),
                              capture_output=True, text=True, timeout=600, env=_environment())
    finally:
        server.close()
    assert done.returncode != 0
    assert "Failed to get weights iterator" in done.stderr, done.stderr[-3000:]
    assert "the main process could not serve the policy" in done.stderr, done.stderr[-3000:]
    assert server.updates == [("/update_weights_from_disk", {"model_path": str((run / "rollout-policy" / "hf")
                                                                                .resolve())})]
