"""IGPO training: rollouts through the agent loop, information-gain turn rewards, group-normalized discounted
advantages, and a PPO-clip update with KL to the frozen SFT model (``venus-edge train igpo CONFIG``).

    venus-edge train igpo configs/igpo/toy.yaml
    accelerate launch --config_file configs/accelerate/fsdp.yaml -m venus_edge.train.igpo_trainer CONFIG

Defaults are DR-Venus's (PROTOCOL.md, "Training facts"): group size 8, 16 questions per step, one update per step,
lr 1e-6, PPO clip 0.2 (dual clip 3), low-variance KL 0.001 to the SFT reference, token-mean loss, IG scored after
``visit`` turns as a log-prob difference, ``scaled_separate`` normalization, gamma 0.95, format penalty -1.

Each step: ``questions_per_step`` questions are drawn (seeded by the step, so a resumed run draws the same ones),
``group_size`` rollouts of each are sampled by the current policy, rewards and advantages are computed (``igpo``,
``igpo_rollout``), and the policy takes one optimizer step over every trained token. Rollouts are sampled

- in this process on ``TransformersEngine``, one after another (``rollout_server`` unset); or
- on a model server through the runtime's ``OpenAIEngine``, ``rollout_concurrency`` sessions at once (the server
  batches them): ``rollout_server: llama-server`` starts llama.cpp's server on a GGUF export of the policy (in the
  training dtype) and restarts it on the new weights after every step; ``rollout_server: http://host:port`` uses
  a running server (vLLM, SGLang, llama-server), and ``sync_command`` (run before every step's rollouts with
  ``{model_dir}`` replaced by a folder holding the policy as a Hugging Face checkpoint) must make it serve those
  weights (e.g. a script calling vLLM's weight-reload endpoint). Token ids are the server's own (on llama-server
  through ``OpenAIEngine(exact_token_ids=True)``); PPO's old log-probabilities are recomputed on the policy, one
  forward per sequence (the largest gap from the server's is logged as ``server_logprob_gap``); the information
  gain is scored here, on the policy.

Under ``accelerate launch`` every process repeats the rollouts (sharding them across processes is not built). Progress
(reward, accuracy, IG, KL, clip fraction, tokens/s) is shown live and appended to ``OUT/log.jsonl``; checkpoints
(``OUT/checkpoints/step-N``) are written atomically and a rerun resumes from the newest.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import random
import shlex
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date as Date
from pathlib import Path
from typing import Any, ClassVar, Sequence

from venus_edge.train.config import ConfigFile, betas, flag, number, optional, paths, text
from venus_edge.train.igpo import NORMALIZATIONS, igpo_advantages, policy_loss, turn_advantages
from venus_edge.train.igpo_rollout import RecordingEngine, Rollout, run_rollout

__all__ = ["IGPOConfig", "IGPOResult", "RolloutServerError", "train_igpo"]


class RolloutServerError(RuntimeError):
    """The rollout server could not be given the policy: ``sync_command`` failed, or llama-server did not start."""


@dataclass(frozen=True)
class IGPOConfig(ConfigFile):
    """One IGPO run (a YAML or JSON file; relative paths are relative to the file).

    Attributes:
        model: the SFT checkpoint (Hugging Face folder); also the frozen KL reference.
        questions: JSONL/CSV/parquet files of questions with answers (``venus-edge eval``'s formats).
        corpus: folders the ``search`` and ``visit`` tools read (extractive visit).
        output_dir: checkpoints, ``log.jsonl``, ``rollouts.jsonl`` and ``final/``.
        steps: optimizer steps; questions_per_step, group_size: rollouts per step = their product.
        information_gain: False is the outcome-only ablation (GRPO with the same format penalties).
        score_after: tools whose results are scored for IG (``all``: every tool call).
        ig_kind: ``logprob`` (DR-Venus) or ``prob`` (the original IGPO).
        normalization, gamma, format_penalty, outcome_metric: see ``igpo.igpo_advantages`` and ``igpo_rollout``.
        clip, clip_high, dual_clip, kl_coef: the loss (``igpo.policy_loss``).
        learning_rate, adam_betas, weight_decay, max_grad_norm: AdamW.
        max_turns, max_tokens, n_ctx, temperature, top_p, top_k, presence_penalty, search_results: the rollouts'
            agent settings (max_tokens is per turn).
        rollout_server: None (rollouts in this process), ``llama-server`` (a managed llama.cpp server on the
            policy's GGUF export) or the URL of a running OpenAI-compatible server (needs ``sync_command``).
        rollout_concurrency: rollouts in flight at once on a server (its parallel slots).
        sync_command: with a server URL, the shell command that loads ``{model_dir}`` into it before each step.
        dtype, seed, save_every, keep_checkpoints: as in SFT.
    """

    model: str
    questions: tuple[str, ...]
    corpus: tuple[str, ...]
    output_dir: str
    steps: int = 10
    questions_per_step: int = 16
    group_size: int = 8
    information_gain: bool = True
    score_after: str = "visit"
    ig_kind: str = "logprob"
    normalization: str = "scaled_separate"
    gamma: float = 0.95
    format_penalty: float = -1.0
    outcome_metric: str = "em"
    clip: float = 0.2
    clip_high: float | None = None
    dual_clip: float = 3.0
    kl_coef: float = 0.001
    learning_rate: float = 1e-6
    adam_betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    max_turns: int = 8
    max_tokens: int = 512
    n_ctx: int = 8192
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    presence_penalty: float = 0.0
    search_results: int = 10
    rollout_server: str | None = None
    rollout_concurrency: int = 8
    sync_command: str | None = None
    dtype: str = "float32"
    seed: int = 0
    save_every: int = 1
    keep_checkpoints: int = 2

    required_settings: ClassVar[tuple[str, ...]] = ("model", "questions", "corpus", "output_dir")
    path_settings: ClassVar[tuple[str, ...]] = ("model", "output_dir")
    path_list_settings: ClassVar[tuple[str, ...]] = ("questions", "corpus")

    def check(self) -> None:
        """Raises ValueError for settings that cannot train."""
        if self.steps < 1 or self.questions_per_step < 1 or self.group_size < 1:
            raise ValueError("steps, questions_per_step and group_size must be >= 1")
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {', '.join(NORMALIZATIONS)}, got {self.normalization!r}")
        if self.ig_kind not in ("logprob", "prob") or self.outcome_metric not in ("em", "f1"):
            raise ValueError("ig_kind must be logprob or prob, outcome_metric em or f1")
        if not 0 < self.clip < 1 or self.dual_clip <= 1 or self.kl_coef < 0 or self.learning_rate <= 0:
            raise ValueError("need 0 < clip < 1, dual_clip > 1, kl_coef >= 0 and learning_rate > 0")
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"gamma must lie in [0, 1], got {self.gamma}")
        if self.max_turns < 1 or self.max_tokens < 1 or self.n_ctx < 256:
            raise ValueError("max_turns and max_tokens must be >= 1, n_ctx >= 256")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype {self.dtype!r}: use float32, bfloat16 or float16")
        if self.save_every < 1 or self.keep_checkpoints < 1:
            raise ValueError("save_every and keep_checkpoints must be >= 1")
        if self.rollout_concurrency < 1:
            raise ValueError("rollout_concurrency must be >= 1")
        server = self.rollout_server
        if server is not None and server != "llama-server" and not server.startswith(("http://", "https://")):
            raise ValueError(f"rollout_server must be llama-server or an http(s) URL, got {server!r}")
        if server is not None and server != "llama-server" and not self.sync_command:
            raise ValueError("a rollout_server URL needs sync_command: the server must serve the policy being "
                             "trained, loaded from {model_dir} before every step")
        if self.sync_command is not None and "{model_dir}" not in self.sync_command:
            raise ValueError("sync_command must name {model_dir}, the folder the policy is saved to")

    @property
    def scored_tools(self) -> frozenset[str] | None:
        return None if self.score_after == "all" else frozenset(t.strip() for t in self.score_after.split(",") if t.strip())


IGPOConfig.converters = {
    "questions": paths, "corpus": paths, "steps": number(int), "questions_per_step": number(int),
    "group_size": number(int), "information_gain": flag, "gamma": number(float), "format_penalty": number(float),
    "clip": number(float), "clip_high": optional(number(float)), "dual_clip": number(float), "kl_coef": number(float),
    "learning_rate": number(float), "adam_betas": betas, "weight_decay": number(float),
    "max_grad_norm": number(float), "max_turns": number(int), "max_tokens": number(int), "n_ctx": number(int),
    "temperature": number(float), "top_p": number(float), "top_k": number(int), "presence_penalty": number(float),
    "search_results": number(int), "seed": number(int), "save_every": number(int), "keep_checkpoints": number(int),
    "score_after": text, "ig_kind": text, "normalization": text, "outcome_metric": text, "dtype": text,
    "rollout_server": optional(text), "rollout_concurrency": number(int), "sync_command": optional(text),
}


@dataclass
class IGPOResult:
    """What a run did: steps trained, the step it resumed from, the final model's folder, the last step's
    metrics, and accelerate's distributed type."""

    steps: int
    resumed_from: int
    final_dir: Path | None
    last: dict[str, Any] = field(default_factory=dict)
    distributed: str = "NO"


def _rollout_record(step: int, rollout: Rollout) -> dict[str, Any]:
    return {"step": step, "group": rollout.group, "answer": rollout.answer, "answers": list(rollout.answers),
            "correct": rollout.correct, "outcome": rollout.outcome, "termination": rollout.termination,
            "turns": rollout.turns, "boundary_scores": rollout.boundary_scores,
            "rewards": [[r.turn, round(r.value, 6), r.kind] for r in rollout.rewards], "failure": rollout.failure,
            "sequences": len(rollout.sequences), "trained_tokens": sum(s.trained_tokens for s in rollout.sequences)}


def _sequence_logprobs(model: Any, ids: Sequence[int], device: Any) -> Any:
    """log p(ids[t] | ids[:t]) for t >= 1, shape (len(ids) - 1,)."""
    import torch

    tensor = torch.tensor([list(ids)], device=device)
    logits = model(input_ids=tensor).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, tensor[0, 1:, None])[:, 0]


def train_igpo(config: IGPOConfig, *, progress: bool = True) -> IGPOResult:
    """Run (or resume) the IGPO training of ``config``.

    Raises:
        ValueError: no question to train on, or a checkpoint of another config in ``output_dir``.
        FileNotFoundError: a question file or corpus folder that does not exist.
    """
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from venus_edge.agent import AgentConfig
    from venus_edge.engines.base import SamplingParams
    from venus_edge.eval.data import load_examples
    from venus_edge.train.hf_engine import TransformersEngine
    from venus_edge.train.sft import _checkpoints, _Progress, _save_checkpoint, _save_final

    for folder in config.corpus:
        if not Path(folder).is_dir():
            raise FileNotFoundError(f"corpus folder {folder} does not exist")
    examples = [e for source in config.questions for e in load_examples(source).examples]
    if not examples:
        raise ValueError(f"no question in {', '.join(config.questions)}")
    accelerator = Accelerator()
    set_seed(config.seed)
    output_dir = Path(config.output_dir)
    dtype = getattr(torch, config.dtype)
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    model = AutoModelForCausalLM.from_pretrained(config.model, dtype=dtype)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=config.learning_rate, betas=config.adam_betas)
    model, optimizer = accelerator.prepare(model, optimizer)
    reference = reference.to(accelerator.device)
    fingerprint = json.dumps({k: config.to_dict()[k] for k in ("model", "questions", "corpus", "seed",
                              "questions_per_step", "group_size", "information_gain")}, sort_keys=True)
    start = 0
    if checkpoints := _checkpoints(output_dir):
        start, path = checkpoints[-1]
        state = json.loads((path / "state.json").read_text())
        if state.get("fingerprint") != fingerprint:
            raise ValueError(f"{path} was written by another config ({state.get('fingerprint')}); use a new output_dir")
        accelerator.load_state(str(path))
        accelerator.print(f"resumed from {path} (step {start} of {config.steps})")
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    # The system prompt carries the date: a run resumed on a later day must keep the date it started with.
    date_file = output_dir / "run_date.txt"
    if start == 0 or not date_file.is_file():
        date_file.write_text(Date.today().isoformat() + "\n")
    today = Date.fromisoformat(date_file.read_text().strip())
    for name in ("log.jsonl", "rollouts.jsonl"):  # rows of steps after the checkpoint are redone: drop them
        path = output_dir / name
        if path.is_file():
            kept = [row for row in path.read_text(encoding="utf-8").splitlines() if json.loads(row)["step"] <= start]
            path.write_text("".join(row + "\n" for row in kept), encoding="utf-8")
    if start >= config.steps:
        final = output_dir / "final"
        return IGPOResult(start, start, final if final.is_dir() else None, {},
                          str(accelerator.distributed_type.value))

    policy = accelerator.unwrap_model(model)
    local_engine = TransformersEngine(policy, tokenizer, n_ctx=config.n_ctx) if not config.rollout_server else None
    server = _RolloutServer(config, output_dir / "rollout-policy") if config.rollout_server else None
    tools = _ToolsPerThread(config)
    pool = ThreadPoolExecutor(config.rollout_concurrency) if server is not None and config.rollout_concurrency > 1 \
        else None
    sampling = SamplingParams(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k,
                              presence_penalty=config.presence_penalty, max_tokens=config.max_tokens, logprobs=True)
    last: dict[str, Any] = {}
    bar = _Progress(config.steps, start, enabled=progress and accelerator.is_main_process, label="igpo",
                    figure="reward")
    try:
        with bar:
            for step in range(start, config.steps):
                started = time.perf_counter()
                drawn = random.Random(config.seed * 1_000_003 + step).sample(
                    examples, min(config.questions_per_step, len(examples)))
                policy.eval()
                served = server.serve(policy, tokenizer) if server is not None else None
                if local_engine is not None:
                    local_engine.forget_cache()
                sampling_started = time.perf_counter()  # the server's weight sync is not rollout time

                def rollout(job: tuple[int, int, Any]) -> Rollout:
                    q, g, example = job
                    # the agent samples turn k with seed + k: rollouts' seeds lie max_turns + 2 apart
                    rollout_seed = ((config.seed * 7919 + step) * 100_003 + q * config.group_size + g) * (
                        config.max_turns + 2)
                    agent_config = AgentConfig(max_turns=config.max_turns, max_retries=1, sampling=sampling,
                                               seed=rollout_seed, today=today,
                                               answer_reserve_tokens=min(1024, config.n_ctx // 4))
                    engine = local_engine if served is None else RecordingEngine(served)
                    return run_rollout(
                        engine, tools.get(), example.question, example.answers,
                        group=f"{q}:{example.id}", agent_config=agent_config, outcome_metric=config.outcome_metric,
                        model=policy if config.information_gain else None,
                        encode=tokenizer if config.information_gain else None,
                        information_gain=config.information_gain, score_after=config.scored_tools,
                        ig_kind=config.ig_kind, format_penalty=config.format_penalty)

                jobs = [(q, g, example) for q, example in enumerate(drawn) for g in range(config.group_size)]
                rollouts = list(pool.map(rollout, jobs)) if pool is not None else [rollout(job) for job in jobs]
                rollout_s = time.perf_counter() - sampling_started
                logprob_gap = _recompute_old_logprobs(policy, rollouts, accelerator.device) if served else None
                metrics = _update(config, model, reference, optimizer, accelerator, rollouts)
                generated = sum(s.trained_tokens for r in rollouts for s in r.sequences)
                gains = [r.value for x in rollouts for r in x.rewards if r.kind == "information_gain"]
                turns = sum(len(r.turns) for r in rollouts)
                last = {
                    "step": step + 1, "reward": round(sum(r.outcome for r in rollouts) / len(rollouts), 4),
                    "accuracy": round(sum(r.correct for r in rollouts) / len(rollouts), 4),
                    "ig_mean": round(sum(gains) / len(gains), 6) if gains else None, "ig_count": len(gains),
                    **metrics,
                    "well_formed_turns": round(sum(r.well_formed_turns for r in rollouts) / max(turns, 1), 4),
                    "tool_calls": round(sum(r.tool_calls for r in rollouts) / len(rollouts), 3),
                    "failures": sum(r.failure is not None for r in rollouts),
                    "rollout_tokens_per_s": round(generated / rollout_s, 1) if rollout_s else None,
                    "server_logprob_gap": logprob_gap,
                    "step_s": round(time.perf_counter() - started, 2),
                }
                if accelerator.is_main_process:
                    with (output_dir / "log.jsonl").open("a", encoding="utf-8") as log:
                        log.write(json.dumps(last) + "\n")
                    with (output_dir / "rollouts.jsonl").open("a", encoding="utf-8") as out:
                        out.writelines(json.dumps(_rollout_record(step + 1, r)) + "\n" for r in rollouts)
                bar.update(step + 1, last["reward"], last["rollout_tokens_per_s"] or 0.0)
                if (step + 1) % config.save_every == 0 or step + 1 == config.steps:
                    _save_checkpoint(accelerator, output_dir, step + 1, fingerprint, config.keep_checkpoints)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        tools.close()
        if server is not None:
            server.close()
    final_dir = _save_final(accelerator, model, tokenizer, output_dir)
    return IGPOResult(config.steps, start, final_dir, last, str(accelerator.distributed_type.value))


def _recompute_old_logprobs(policy: Any, rollouts: Sequence[Rollout], device: Any) -> float | None:
    """Replace the old log-probs of server rollouts with the policy's own (one forward per sequence, as verl's
    ``compute_log_prob``): the server may send none for some tokens, and its arithmetic differs from the trainer's.
    Returns the largest difference from the log-probs the server sent (None if it sent none): how far the
    server's numbers were from the policy's."""
    import torch

    gap: float | None = None
    for rollout in rollouts:
        for sequence in rollout.sequences:
            with torch.no_grad():
                own = [0.0] + _sequence_logprobs(policy, sequence.ids, device).tolist()
            for i, turn in enumerate(sequence.turn_of):
                if turn >= 0 and not math.isnan(sequence.old_logprobs[i]):
                    gap = max(gap or 0.0, abs(sequence.old_logprobs[i] - own[i]))
            sequence.old_logprobs = [value if turn >= 0 else 0.0 for value, turn in zip(own, sequence.turn_of)]
    return round(gap, 6) if gap is not None else None


class _ToolsPerThread:
    """The corpus's ``search`` and ``visit`` tools, one set per thread that runs rollouts (a tool keeps state
    between calls: its session's pages)."""

    def __init__(self, config: IGPOConfig) -> None:
        self._config = config
        self._local = threading.local()
        self._made: list[list[Any]] = []
        self._lock = threading.Lock()

    def get(self) -> list[Any]:
        from venus_edge.toolbox import default_tools

        tools = getattr(self._local, "tools", None)
        if tools is None:
            tools = default_tools(list(self._config.corpus), search_results=self._config.search_results)
            self._local.tools = tools
            with self._lock:
                self._made.append(tools)
        return tools

    def close(self) -> None:
        from venus_edge.toolbox import close_tools

        for tools in self._made:
            close_tools(tools)
        self._made.clear()


class _RolloutServer:
    """The model server rollouts are sampled on, serving the current policy (``IGPOConfig.rollout_server``).

    ``serve`` saves the policy to ``folder/hf`` (a Hugging Face checkpoint) and makes the server serve it: the
    managed ``llama-server`` is restarted on a fresh GGUF export (``venus_edge.quantize.convert_checkpoint`` in the
    training dtype); a server at a URL is given ``sync_command``. Returns an ``OpenAIEngine`` on it (with
    ``exact_token_ids`` on llama-server).

    Raises:
        RolloutServerError: the sync command failed, or llama-server did not start.
    """

    _GGUF_TYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}

    def __init__(self, config: IGPOConfig, folder: Path) -> None:
        self.config = config
        self.folder = folder
        self.process: Any = None
        self.engine: Any = None

    def serve(self, policy: Any, tokenizer: Any) -> Any:
        from venus_edge.engines.openai import OpenAIEngine

        checkpoint = self.folder / "hf"
        policy.save_pretrained(checkpoint, safe_serialization=True)
        tokenizer.save_pretrained(checkpoint)
        if self.config.rollout_server == "llama-server":
            from venus_edge.quantize.convert import convert_checkpoint
            from venus_edge.testing import LlamaServer

            gguf = convert_checkpoint(checkpoint, self.folder / "policy.gguf",
                                      out_type=self._GGUF_TYPES[self.config.dtype])
            self.close()
            slots = self.config.rollout_concurrency
            kv = self._GGUF_TYPES[self.config.dtype]  # the KV cache in the training dtype too (default F16)
            # flash attention works in F16: off for F32 training (log-probs then agree to ~1e-6, not ~1e-2)
            exact = ("-fa", "off") if self.config.dtype == "float32" else ()
            try:
                self.process = LlamaServer(gguf, slots=slots, n_ctx=self.config.n_ctx * slots,
                                           extra_args=("-ctk", kv, "-ctv", kv, *exact))
            except (FileNotFoundError, RuntimeError) as exc:
                raise RolloutServerError(f"the rollout llama-server did not start: {exc}") from exc
            self.engine = OpenAIEngine(self.process.url, exact_token_ids=True)
            return self.engine
        command = self.config.sync_command.replace("{model_dir}", shlex.quote(str(checkpoint.resolve())))
        done = subprocess.run(command, shell=True, capture_output=True, text=True)
        if done.returncode != 0:
            raise RolloutServerError(f"sync_command exited with {done.returncode}: "
                                     f"{(done.stderr or done.stdout).strip()[-1000:]}")
        if self.engine is None:
            self.engine = OpenAIEngine(self.config.rollout_server)
            # llama-server's streamed replies leave out the ids of tokens that end inside a UTF-8 character
            self.engine.exact_token_ids = self.engine.server_kind == "llama-server"
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if self.process is not None:
            self.process.stop()
            self.process = None


def _update(config: IGPOConfig, model: Any, reference: Any, optimizer: Any, accelerator: Any,
            rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """One optimizer step over every trained token of the step's rollouts (token-mean over the whole batch)."""
    import torch

    advantages, stats = igpo_advantages([r.rewards for r in rollouts], [r.group for r in rollouts],
                                        normalization=config.normalization, gamma=config.gamma)
    work = []
    for rollout, returns in zip(rollouts, advantages):
        per_turn = turn_advantages(returns, len(rollout.turns))
        for sequence in rollout.sequences:
            turn_of = sequence.turn_of[1:]
            values = [per_turn[t] if 0 <= t < len(per_turn) else 0.0 for t in turn_of]
            mask = [1.0 if t >= 0 else 0.0 for t in turn_of]
            work.append((sequence.ids, values, mask, sequence.old_logprobs[1:]))
    total = sum(sum(mask) for _, _, mask, _ in work)
    model.train()
    device = accelerator.device
    summed = {"pg_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "dual_clip_fraction": 0.0}
    for index, (ids, values, mask, old) in enumerate(work):
        with torch.no_grad():
            ref = _sequence_logprobs(reference, ids, device)
        context = accelerator.no_sync(model) if index < len(work) - 1 else contextlib.nullcontext()
        with context:
            logprobs = _sequence_logprobs(model, ids, device)
            weights = torch.tensor(mask, device=device)
            loss, parts = policy_loss(logprobs, torch.tensor(old, device=device), torch.tensor(values, device=device),
                                      weights, clip=config.clip, clip_high=config.clip_high,
                                      dual_clip=config.dual_clip, ref_logprobs=ref, kl_coef=config.kl_coef)
            share = parts["tokens"] / max(total, 1.0)  # token-mean over the whole batch, not per sequence
            accelerator.backward(loss * share)
        for key in summed:
            summed[key] += parts[key] * share
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm) if work else None
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {**{k: round(v, 6) for k, v in summed.items()}, **stats.to_dict(), "trained_tokens": int(total),
            "grad_norm": float(grad_norm) if grad_norm is not None else None}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m venus_edge.train.igpo_trainer CONFIG [--steps N]``: the entry point ``accelerate launch`` runs."""
    import argparse

    parser = argparse.ArgumentParser(prog="venus_edge.train.igpo_trainer", description="IGPO on a toy or real world")
    parser.add_argument("config", type=Path)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    config = IGPOConfig.from_file(args.config, steps=args.steps, output_dir=args.output_dir)
    result = train_igpo(config, progress=not args.quiet)
    print(json.dumps({"steps": result.steps, "resumed_from": result.resumed_from,
                      "final": str(result.final_dir) if result.final_dir else None, **result.last}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
