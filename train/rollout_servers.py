"""Rollouts on a serving engine: the model server IGPO samples on, kept serving the policy being trained
(``IGPOConfig.rollout_server``).

    rollout_server: llama-server       llama.cpp's server on a GGUF export of the policy, restarted every step
    rollout_server: vllm               ``vllm serve`` started here (or the one at rollout_server_url)
    rollout_server: sglang             ``python -m sglang.launch_server`` started here (or at rollout_server_url)
    rollout_server: http://host:port   any OpenAI-compatible server, given ``sync_command`` before every step

Before each step's rollouts ``RolloutServer.serve`` writes the policy as a Hugging Face checkpoint into
``folder/hf`` (each file staged beside it and moved in whole, so a server never reads a half-written file) and has
the server load it by the engine's own mechanism:

- **SGLang**: ``POST /update_weights_from_disk {"model_path": folder/hf}``, its documented in-place update
  (``python/sglang/srt/entrypoints/http_server.py``; SGLang waits for running requests, loads, flushes its radix
  cache and answers ``{"success", "message"}``, HTTP 400 on failure);
- **vLLM**: ``POST /collective_rpc {"method": "reload_weights"}`` then ``POST /reset_prefix_cache``, the in-place
  reload of vLLM's sleep-mode guide (``docs/features/sleep_mode.md``: "Load weights in-place"; routes in
  ``vllm/entrypoints/serve/dev/``, served with ``VLLM_SERVER_DEV_MODE=1``). It reloads from the folder the server was
  started on, so the server must serve ``folder/hf``: the trainer starts it there, and checks the ``root`` a running
  server reports in ``/v1/models``. Chosen over vLLM's weight-transfer API (``/init_weight_transfer_engine`` +
  ``/update_weights``, NCCL or CUDA IPC) and TRL's ``vllm-serve`` (``/init_communicator/`` +
  ``/update_named_param/``, NCCL) because those move tensors over NCCL from a trainer on a GPU with vLLM installed
  (they cannot run, or be tested, from this CPU trainer), TRL's server does not serve the OpenAI completions the
  rollouts use, and the weight-transfer protocol changed between vLLM releases (two phases, then four), while the
  disk reload is the same call in every release since the V1 engine and works across machines on a shared
  filesystem. The price is a checkpoint written and read per step (seconds for a 4B model on local NVMe);
- **llama-server**: restarted on a fresh GGUF export (``venus_edge.quantize.convert_checkpoint``, training dtype);
- **a URL**: ``sync_command`` with ``{model_dir}`` replaced by the folder.

Under ``accelerate launch`` with several processes one server serves them all (``SharedRolloutServer``): the main
process alone writes the policy and syncs or restarts the server, then tells every process where it is; a second
writer of ``folder/hf`` or a second server per process would race on the same files and the same GPU.

A sync that fails raises ``RolloutServerError`` naming the server, the call and its answer; the step's rollouts
have not started, so the checkpoints already written are whole and a rerun resumes from the newest.

Token ids and log-probabilities come from the server (``OpenAIEngine``): vLLM's streamed completions with
``return_tokens_as_token_ids`` and ``logprobs``; SGLang's native ``/generate`` with ``input_ids`` and
``return_logprob`` and llama-server's ``/completion`` with ``return_tokens`` (``exact_token_ids``). PPO's old
log-probabilities are recomputed on the policy (``igpo_trainer``), which also covers tokens the server sent none for.

Departures from the engines' RL integrations (verl, TRL, NeMo RL):

1. Weights go through disk, not NCCL: one code path for a server on this machine or another, no GPU needed in the
   trainer, at the cost of one checkpoint write and read per step.
2. The managed vLLM and SGLang servers are separate processes started here (``--gpu-memory-utilization`` or
   ``--mem-fraction-static`` in ``rollout_server_args`` leaves room for the trainer on a shared GPU), not engines
   colocated in the trainer's process with sleep mode.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx

from venus_edge.train.errors import RolloutServerError

__all__ = ["SERVER_KINDS", "RolloutServer", "SharedRolloutServer", "save_policy"]

#: The engines ``rollout_server`` may name (beside an http(s) URL).
SERVER_KINDS = ("llama-server", "vllm", "sglang")
#: Seconds a started vLLM or SGLang server may take to answer ``/health`` (loading, compiling, CUDA graphs).
START_TIMEOUT_S = 900.0
#: Seconds a weight update may take (SGLang waits for running requests; a 4B model loads in well under this).
SYNC_TIMEOUT_S = 600.0


def save_policy(policy: Any, tokenizer: Any, folder: Path) -> Path:
    """Write ``policy`` and ``tokenizer`` as a Hugging Face checkpoint into ``folder``: saved beside it, then each
    file moved in whole (``os.replace``), so a server that reads the folder never sees half a file. Returns it."""
    staging = folder.with_name(folder.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    policy.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    folder.mkdir(parents=True, exist_ok=True)
    for file in staging.iterdir():
        os.replace(file, folder / file.name)
    staging.rmdir()
    return folder


class RolloutServer:
    """The model server rollouts are sampled on, serving the current policy (module docstring).

    Args:
        config: the run's ``IGPOConfig`` (``rollout_server``, ``rollout_server_url``, ``rollout_server_args``,
            ``sync_command``, ``dtype``, ``n_ctx``, ``rollout_concurrency``, ``seed``).
        folder: where the policy is written for the server (``folder/hf``) and a started server logs
            (``folder/server.log``).

    Attributes:
        process: the server process started here (``LlamaServer`` or ``subprocess.Popen``), or None.
        engine: the ``OpenAIEngine`` on the server, or None before the first ``serve`` and after ``close``.
        syncs: weight updates sent to the server so far (not counting the load at start).

    Raises (``serve``):
        RolloutServerError: the server did not start, or refused or failed the weight update.
    """

    _GGUF_TYPES: ClassVar[dict[str, str]] = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}

    def __init__(self, config: Any, folder: Path) -> None:
        self.config = config
        self.folder = folder
        self.process: Any = None
        self.engine: Any = None
        self.syncs = 0
        self._url: str | None = getattr(config, "rollout_server_url", None)

    @property
    def kind(self) -> str:
        """``llama-server``, ``vllm``, ``sglang``, or ``url`` (a server given ``sync_command``)."""
        server = str(self.config.rollout_server)
        return server if server in SERVER_KINDS else "url"

    def serve(self, policy: Any, tokenizer: Any) -> Any:
        """Make the server serve ``policy``; returns the ``OpenAIEngine`` on it."""
        checkpoint = save_policy(policy, tokenizer, self.folder / "hf")
        if self.kind == "llama-server":
            return self._restart_llama_server(checkpoint)
        if self.kind == "url":
            return self._run_sync_command(checkpoint)
        if self._url is None:  # the first step: start the engine on the policy, nothing to update
            self._start(checkpoint)
        elif self.kind == "vllm":
            self._reload_vllm(checkpoint)
        else:
            self._update_sglang(checkpoint)
        return self._engine()

    def close(self) -> None:
        """Close the engine and stop a server started here."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if isinstance(self.process, subprocess.Popen):
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(30)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            self._url = None
        elif self.process is not None:
            self.process.stop()
        self.process = None

    # ------------------------------------------------------------------------------------------ engines
    def _engine(self) -> Any:
        from venus_edge.engines.openai import OpenAIEngine

        if self.engine is None:
            assert self._url is not None, "a server is started or given before its engine"
            # a started server's window is n_ctx; a running one reports its own
            n_ctx = self.config.n_ctx if self.process is not None else None
            self.engine = OpenAIEngine(self._url, n_ctx=n_ctx, exact_token_ids=self.kind == "sglang")
        return self.engine

    def _restart_llama_server(self, checkpoint: Path) -> Any:
        from venus_edge.engines.openai import OpenAIEngine
        from venus_edge.quantize.convert import convert_checkpoint
        from venus_edge.testing import LlamaServer

        gguf = convert_checkpoint(checkpoint, self.folder / "policy.gguf", out_type=self._GGUF_TYPES[self.config.dtype])
        self.close()
        slots = self.config.rollout_concurrency
        kv = self._GGUF_TYPES[self.config.dtype]  # the KV cache in the training dtype too (default F16)
        # flash attention works in F16: off for F32 training (log-probs then agree to ~1e-6, not ~1e-2)
        exact = ("-fa", "off") if self.config.dtype == "float32" else ()
        extra = self.config.rollout_server_args or ()
        try:
            self.process = LlamaServer(gguf, slots=slots, n_ctx=self.config.n_ctx * slots,
                                       extra_args=("-ctk", kv, "-ctv", kv, *exact, *extra))
        except (FileNotFoundError, RuntimeError) as exc:
            raise RolloutServerError(f"the rollout llama-server did not start: {exc}") from exc
        self.engine = OpenAIEngine(self.process.url, exact_token_ids=True)
        return self.engine

    def _run_sync_command(self, checkpoint: Path) -> Any:
        from venus_edge.engines.openai import OpenAIEngine

        server, sync_command = self.config.rollout_server, self.config.sync_command
        # IGPOConfig's rules: this path is a rollout_server URL, and a URL comes with a sync_command
        assert server is not None and sync_command is not None, "a rollout_server URL needs a sync_command"
        command = sync_command.replace("{model_dir}", shlex.quote(str(checkpoint.resolve())))
        done = subprocess.run(command, shell=True, capture_output=True, text=True)
        if done.returncode != 0:
            raise RolloutServerError(f"sync_command exited with {done.returncode}: "
                                     f"{(done.stderr or done.stdout).strip()[-1000:]}")
        self.syncs += 1
        if self.engine is None:
            self.engine = OpenAIEngine(server)
            # llama-server's streamed replies leave out the ids of tokens that end inside a UTF-8 character;
            # SGLang's OpenAI-form replies name tokens by text: both are asked natively
            self.engine.exact_token_ids = self.engine.server_kind in ("llama-server", "sglang")
        return self.engine

    # ------------------------------------------------------------------------------------------ vLLM, SGLang
    def _start(self, checkpoint: Path) -> None:
        """Start vLLM's or SGLang's OpenAI-compatible server on ``checkpoint``, on a free port of 127.0.0.1, and
        wait for its ``/health``."""
        from venus_edge.testing import free_port, wait_for_health

        port = free_port()
        command = self._start_command(checkpoint, port)
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}  # vLLM's reload and cache routes (sleep_mode.md)
        log_path = self.folder / "server.log"
        with log_path.open("ab") as log:
            try:
                self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            except FileNotFoundError as exc:
                raise RolloutServerError(f"cannot start the rollout {self.kind} server: {exc}; install it "
                                         f"(pip install {self.kind}) or set rollout_server_url") from exc
        url = f"http://127.0.0.1:{port}"
        state = wait_for_health(self.process, url, START_TIMEOUT_S, poll_s=0.5, request_timeout_s=2)
        if state == "exited":
            tail = log_path.read_text(errors="replace")[-2000:]
            self.process = None
            raise RolloutServerError(f"the rollout {self.kind} server exited: {' '.join(command)}\n{tail}")
        if state == "timeout":
            self.close()
            raise RolloutServerError(f"the rollout {self.kind} server did not answer {url}/health within "
                                     f"{START_TIMEOUT_S:.0f} s; its log: {log_path}")
        self._url = url

    def _start_command(self, checkpoint: Path, port: int) -> list[str]:
        """The documented launch command of the engine, serving ``checkpoint`` in the training dtype."""
        config = self.config
        extra: Sequence[str] = config.rollout_server_args or ()
        if self.kind == "vllm":
            return ["vllm", "serve", str(checkpoint), "--host", "127.0.0.1", "--port", str(port),
                    "--served-model-name", "policy", "--dtype", config.dtype, "--max-model-len", str(config.n_ctx),
                    "--max-num-seqs", str(config.rollout_concurrency), "--seed", str(config.seed), *extra]
        return [sys.executable, "-m", "sglang.launch_server", "--model-path", str(checkpoint), "--host", "127.0.0.1",
                "--port", str(port), "--served-model-name", "policy", "--dtype", config.dtype, "--context-length",
                str(config.n_ctx), "--random-seed", str(config.seed), *extra]

    def _reload_vllm(self, checkpoint: Path) -> None:
        """vLLM reloads the weights in place from the folder it serves, then forgets its cached prefixes."""
        if self.syncs == 0 and self.process is None:
            self._check_vllm_serves(checkpoint)
        self._post("/collective_rpc", {"method": "reload_weights"},
                   hint="start vLLM with VLLM_SERVER_DEV_MODE=1, which serves /collective_rpc")
        self._post("/reset_prefix_cache", None, hint="start vLLM with VLLM_SERVER_DEV_MODE=1")
        self.syncs += 1

    def _check_vllm_serves(self, checkpoint: Path) -> None:
        """A running vLLM reloads from the folder it was started on: that folder must be ``checkpoint``."""
        try:
            models = httpx.get(f"{self._url}/v1/models", timeout=30, trust_env=False).json().get("data") or []
            roots = [str(model.get("root") or "") for model in models]
        except (httpx.HTTPError, AttributeError, TypeError, ValueError) as exc:  # no answer, or not a model list
            raise RolloutServerError(f"the vLLM server at {self._url} did not list its model: "
                                     f"{type(exc).__name__}: {exc}") from exc
        if not any(root and Path(root).is_dir() and Path(root).resolve() == checkpoint.resolve() for root in roots):
            raise RolloutServerError(
                f"the vLLM server at {self._url} serves {', '.join(roots) or 'no model'}, but reload_weights reloads "
                f"from the folder a server was started on, and the policy is written to {checkpoint.resolve()}: copy "
                f"the SFT checkpoint there and start VLLM_SERVER_DEV_MODE=1 vllm serve {checkpoint.resolve()} (a "
                "folder both machines see), or leave rollout_server_url out to let the trainer start vLLM")

    def _update_sglang(self, checkpoint: Path) -> None:
        """SGLang loads the checkpoint in place (``/update_weights_from_disk``) and flushes its cache."""
        reply = self._post("/update_weights_from_disk", {"model_path": str(checkpoint.resolve())},
                           hint="the folder must be one the SGLang server can read")
        if isinstance(reply, dict) and reply.get("success") is False:
            raise RolloutServerError(f"the SGLang server at {self._url} failed /update_weights_from_disk: "
                                     f"{reply.get('message')}")
        self.syncs += 1

    def _post(self, path: str, body: Any, *, hint: str) -> Any:
        """POST ``body`` to the server; its JSON answer (None when it sent none).

        Raises:
            RolloutServerError: no answer, or an HTTP error (its text and ``hint`` in the message).
        """
        url = f"{self._url}{path}"
        try:
            response = httpx.post(url, json=body, timeout=SYNC_TIMEOUT_S, trust_env=False)
        except httpx.HTTPError as exc:
            raise RolloutServerError(f"the rollout {self.kind} server did not answer POST {url}: {exc}") from exc
        if response.status_code >= 400:
            raise RolloutServerError(f"the rollout {self.kind} server answered POST {url} with HTTP "
                                     f"{response.status_code}: {response.text.strip()[:500]} ({hint})")
        try:
            return response.json()
        except ValueError:
            return None


class SharedRolloutServer:
    """One rollout server for every process of a run: the main process owns the ``RolloutServer`` (writes the
    policy, syncs or restarts the server); the others sample on the same server through an ``OpenAIEngine`` of
    their own. With one process it is the ``RolloutServer`` itself.

    Args:
        config: the run's ``IGPOConfig``.
        folder: as ``RolloutServer``'s.
        accelerator: the run's ``accelerate.Accelerator`` (``num_processes``, ``is_main_process``).

    Raises (``serve``, on every process, so none waits for a step the others left):
        RolloutServerError: the main process could not serve the policy; the other processes' message names it.
    """

    def __init__(self, config: Any, folder: Path, accelerator: Any) -> None:
        self.accelerator = accelerator
        self.server = RolloutServer(config, folder) if accelerator.is_main_process else None
        self.engine: Any = None  # the other processes' engine on the main process's server

    def serve(self, policy: Any, tokenizer: Any) -> Any:
        """Have the server serve ``policy`` (a collective: every process calls it each step); returns this process's
        ``OpenAIEngine`` on it."""
        if self.accelerator.num_processes == 1:
            assert self.server is not None
            return self.server.serve(policy, tokenizer)
        from accelerate.utils import broadcast_object_list

        from venus_edge.engines.openai import OpenAIEngine

        served: Any = None
        message: list[Any] = [None]
        if self.server is not None:
            try:
                served = self.server.serve(policy, tokenizer)
                message = [("served", served.base_url, served.exact_token_ids, served.n_ctx)]
            except RolloutServerError as exc:
                message = [("failed", str(exc))]
                failure = exc
        broadcast_object_list(message)
        status = message[0]
        if status[0] == "failed":
            if self.server is not None:
                raise failure
            raise RolloutServerError(f"the main process could not serve the policy: {status[1]}")
        if self.server is not None:
            return served
        _, url, exact_token_ids, n_ctx = status
        if self.engine is None or self.engine.base_url != url:  # a restarted llama-server listens on a new port
            if self.engine is not None:
                self.engine.close()
            self.engine = OpenAIEngine(url, n_ctx=n_ctx, exact_token_ids=exact_token_ids)
        return self.engine

    def close(self) -> None:
        """Close this process's engine, and on the main process the server."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if self.server is not None:
            self.server.close()
