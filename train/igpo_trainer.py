"""IGPO training: rollouts through the agent loop, information-gain turn rewards, group-normalized discounted
advantages, and a PPO-clip update with KL to the frozen SFT model (``venus-edge train igpo CONFIG``).

    venus-edge train igpo configs/igpo/toy.yaml     # the toy world, after bash scripts/toy_sft.sh
    accelerate launch --config_file configs/accelerate/fsdp.yaml -m venus_edge.train.igpo_trainer CONFIG

Defaults are DR-Venus's (PROTOCOL.md, "Training facts"): group size 8, 16 questions per step, one update per step,
lr 1e-6, PPO clip 0.2 (dual clip 3), low-variance KL 0.001 to the SFT reference, token-mean loss, IG scored after
``visit`` turns as a log-prob difference, ``scaled_separate`` normalization, gamma 0.95, format penalty -1.

Each step: ``questions_per_step`` questions are drawn (seeded by the step, so a resumed run draws the same ones),
``group_size`` rollouts of each are sampled by the current policy, rewards and advantages are computed (``igpo``,
``igpo_rollout``), and the policy takes one optimizer step over every trained token. Rollouts are sampled

- in this process on ``TransformersEngine``, one after another (``rollout_server`` unset); or
- on a model server through the runtime's ``OpenAIEngine``, ``rollout_concurrency`` sessions at once (the server
  batches them), kept serving the policy by ``rollout_servers.RolloutServer``: ``rollout_server: llama-server``
  restarts llama.cpp's server on a GGUF export of the policy (in the training dtype) after every step;
  ``rollout_server: vllm`` or ``sglang`` starts the engine's server (or uses the one at ``rollout_server_url``) and
  gives it each step's weights through the engine's own interface (vLLM's in-place ``reload_weights``, SGLang's
  ``/update_weights_from_disk``); ``rollout_server: http://host:port`` uses any running server, and
  ``sync_command`` (run before every step's rollouts with ``{model_dir}`` replaced by a folder holding the policy as
  a Hugging Face checkpoint) must make it serve those weights. Token ids and their log-probs are the server's own;
  PPO's old log-probabilities are recomputed on the policy, one forward per sequence (the largest gap from the
  server's is logged as ``server_logprob_gap``); the information gain is scored here, on the policy.

Under ``accelerate launch`` (DDP; ``ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N`` on CPUs)
the step is data-parallel: process p samples the groups of the drawn questions q with q mod N = p (a group stays on
one process, so its normalization is local; the rollouts' seeds depend on q, so the rollouts are those of one
process); the batch sums behind ``scaled_separate`` and the token count of the token-mean are all-reduced, and each
loss is scaled so that DDP's gradient average is the one-process gradient (``_update``); the main process gathers
every process's metrics and rollouts and alone writes them. Every process reaches the same collectives in every
step whatever its rollouts did (``run_rollout`` scores a failed rollout instead of raising; a process without
rollouts runs weightless passes). A rollout server is one for all processes (``SharedRolloutServer``: the main process
syncs it). FSDP and ZeRO-3 are refused on several processes: a sharded policy's every
forward is a collective, and rollouts and scoring differ in length per process.

Progress (reward, accuracy, IG, KL, clip fraction, tokens/s) is shown live and appended to ``OUT/log.jsonl``;
checkpoints (``OUT/checkpoints/step-N``) are written atomically and a rerun resumes from the newest, on any number
of processes (``checkpoints``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date as Date
from pathlib import Path
from typing import Any

from venus_edge.protocol import OBSERVATION_STYLES, observation_style
from venus_edge.train.checkpoints import (
    ProgressBar,
    adamw,
    check_finite,
    check_finite_weights,
    end_processes,
    fingerprint,
    json_digest,
    resume,
    save_checkpoint,
    save_final,
    trim_step_log,
)
from venus_edge.train.config import ConfigFile, check_model_source, check_run_settings, require
from venus_edge.train.igpo import NORMALIZATIONS, igpo_advantages, policy_loss, turn_advantages
from venus_edge.train.igpo_rollout import RecordingEngine, Rollout, run_rollout
from venus_edge.train.rollout_servers import SERVER_KINDS, SharedRolloutServer

__all__ = ["IGPOConfig", "IGPOResult", "train_igpo"]

#: What must match for a checkpoint to be resumed: the questions drawn, the groups and the rewards.
_RESUME_SETTINGS = ("model", "questions", "corpus", "seed", "questions_per_step", "group_size", "information_gain")


@dataclass(frozen=True)
class IGPOConfig(ConfigFile):
    """One IGPO run (a YAML or JSON file, where relative paths are relative to the file; or built in Python).
    Each field's help is in its metadata (``IGPOConfig.help_text()``); defaults are DR-Venus's where it gives one."""

    model: str = field(metadata={"path": True, "help": "the SFT checkpoint (Hugging Face folder); also the frozen "
                                                       "KL reference"})
    questions: tuple[str, ...] = field(metadata={"path": True, "help": "JSONL/CSV/parquet files of questions with "
                                                                      "answers (venus-edge eval's formats)"})
    corpus: tuple[str, ...] = field(metadata={"path": True, "help": "folders the search and visit tools read "
                                                                   "(extractive visit)"})
    output_dir: str = field(metadata={"path": True, "help": "checkpoints, log.jsonl, rollouts.jsonl and final/"})
    steps: int = field(default=10, metadata={"help": "optimizer steps"})
    questions_per_step: int = field(default=16, metadata={
        "help": "questions drawn per step (DR-Venus: 16); rollouts per step = questions_per_step * group_size"})
    group_size: int = field(default=8, metadata={"help": "rollouts of each question, normalized as a group "
                                                         "(DR-Venus: 8)"})
    information_gain: bool = field(default=True, metadata={
        "help": "information-gain turn rewards; false is the outcome-only ablation (GRPO with the same format "
                "penalties)"})
    score_after: str = field(default="visit", metadata={
        "help": "comma-separated tools whose results are scored for IG (all: every tool call)"})
    ig_kind: str = field(default="logprob", metadata={
        "help": "logprob (DR-Venus: a log-prob difference) or prob (the original IGPO)"})
    normalization: str = field(default="scaled_separate", metadata={
        "help": f"how rewards are normalized in a group: {', '.join(NORMALIZATIONS)} (igpo.igpo_advantages)"})
    gamma: float = field(default=0.95, metadata={"help": "discount of the turn advantages, in [0, 1] (DR-Venus: "
                                                         "0.95; 0 judges a turn by its own reward)"})
    format_penalty: float = field(default=-1.0, metadata={"help": "the reward of a turn with a format error, in "
                                                                  "place of its own (DR-Venus: -1)"})
    outcome_metric: str = field(default="em", metadata={"help": "em or f1: how the final answer is scored"})
    clip: float = field(default=0.2, metadata={"help": "PPO's clip epsilon, in (0, 1) (DR-Venus: 0.2)"})
    clip_high: float | None = field(default=None, metadata={
        "help": "the upper clip epsilon (clip-higher: the ratio is clipped to [1 - clip, 1 + clip_high]); none "
                "uses clip on both sides"})
    dual_clip: float = field(default=3.0, metadata={"help": "dual-clip bound of negative advantages, > 1 "
                                                            "(DR-Venus: 3)"})
    kl_coef: float = field(default=0.001, metadata={"help": "weight of the low-variance KL to the SFT reference "
                                                            "(DR-Venus: 0.001)"})
    learning_rate: float = field(default=1e-6, metadata={"help": "AdamW's learning rate (DR-Venus: 1e-6)"})
    adam_betas: tuple[float, float] = field(default=(0.9, 0.999), metadata={"help": "AdamW's betas"})
    weight_decay: float = field(default=0.01, metadata={
        "help": "AdamW's weight decay of the matrices; norms and biases do not decay"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping"})
    max_turns: int = field(default=8, metadata={"help": "model turns of a rollout at most"})
    max_tokens: int = field(default=512, metadata={"help": "new tokens of a turn at most"})
    n_ctx: int = field(default=8192, metadata={"help": "the rollouts' context window in tokens, >= 256"})
    temperature: float = field(default=1.0, metadata={"help": "the rollouts' sampling temperature, >= 0"})
    top_p: float = field(default=1.0, metadata={"help": "the rollouts' nucleus sampling, in (0, 1]"})
    top_k: int = field(default=0, metadata={"help": "the rollouts' top-k sampling (0: off)"})
    presence_penalty: float = field(default=0.0, metadata={"help": "the rollouts' presence penalty"})
    search_results: int = field(default=10, metadata={"help": "results of a search call"})
    observation_style: str = field(default="inference", metadata={
        "help": "how the rollouts' prompt and observations are written: inference (the authors' inference code) or "
                "rl (their RL rollouts; README, Observation styles)"})
    rollout_server: str | None = field(default=None, metadata={
        "help": "none (rollouts in this process), llama-server (a managed llama.cpp server on the policy's GGUF "
                "export), vllm or sglang (the engine's server, given each step's weights by its own reload "
                "interface; rollout_servers), or the URL of any running OpenAI-compatible server (needs "
                "sync_command)"})
    rollout_server_url: str | None = field(default=None, metadata={
        "help": "with vllm or sglang, a running server to use instead of starting one (vLLM: started with "
                "VLLM_SERVER_DEV_MODE=1 on OUT/rollout-policy/hf)"})
    rollout_server_args: tuple[str, ...] | None = field(default=None, metadata={
        "help": "more command-line options of a server started here (vllm: --gpu-memory-utilization 0.3)"})
    rollout_concurrency: int = field(default=8, metadata={
        "help": "rollouts in flight at once on a server (its parallel slots)"})
    sync_command: str | None = field(default=None, metadata={
        "help": "with a server URL, the shell command that loads {model_dir} into it before each step"})
    dtype: str = field(default="float32", metadata={"help": "the weights' dtype (float32 on CPU, bfloat16 on GPUs)"})
    seed: int = field(default=0, metadata={"help": "the questions drawn, the rollouts' sampling"})
    save_every: int = field(default=1, metadata={"help": "optimizer steps between checkpoints"})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many checkpoints are kept"})

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_sizes()
        self._check_algorithm()
        check_run_settings(self)
        self._check_server()

    def _check_sizes(self) -> None:
        for name, least in (("steps", 1), ("questions_per_step", 1), ("group_size", 1), ("max_turns", 1),
                            ("max_tokens", 1), ("n_ctx", 256), ("rollout_concurrency", 1), ("search_results", 1)):
            value = getattr(self, name)
            require(value >= least, f"{name} must be >= {least}, got {value}", setting=name, value=value)

    def _check_algorithm(self) -> None:
        require(self.observation_style in OBSERVATION_STYLES, f"observation_style must be one of "
                f"{', '.join(OBSERVATION_STYLES)}, got {self.observation_style!r}", setting="observation_style",
                value=self.observation_style)
        require(self.normalization in NORMALIZATIONS, f"normalization must be one of {', '.join(NORMALIZATIONS)}, "
                f"got {self.normalization!r}", setting="normalization", value=self.normalization)
        require(self.ig_kind in ("logprob", "prob"), f"ig_kind must be logprob or prob, got {self.ig_kind!r}",
                setting="ig_kind", value=self.ig_kind)
        require(self.outcome_metric in ("em", "f1"), f"outcome_metric must be em or f1, got "
                f"{self.outcome_metric!r}", setting="outcome_metric", value=self.outcome_metric)
        require(0 < self.clip < 1, f"clip must lie in (0, 1), got {self.clip}; DR-Venus clips at 0.2",
                setting="clip", value=self.clip)
        require(self.clip_high is None or self.clip_high > 0, f"clip_high must be > 0 or left out, got "
                f"{self.clip_high}; clip-higher runs use about 0.28", setting="clip_high", value=self.clip_high)
        require(self.dual_clip > 1, f"dual_clip must be > 1, got {self.dual_clip}; DR-Venus uses 3",
                setting="dual_clip", value=self.dual_clip)
        require(self.kl_coef >= 0, f"kl_coef must be >= 0, got {self.kl_coef}; 0 turns the KL off",
                setting="kl_coef", value=self.kl_coef)
        require(0 <= self.gamma <= 1, f"gamma must lie in [0, 1], got {self.gamma}; DR-Venus discounts by 0.95",
                setting="gamma", value=self.gamma)
        require(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}; 0 samples greedily",
                setting="temperature", value=self.temperature)
        require(0 < self.top_p <= 1, f"top_p must lie in (0, 1], got {self.top_p}; 1 turns it off",
                setting="top_p", value=self.top_p)
        require(self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}; 0 turns it off", setting="top_k",
                value=self.top_k)

    def _check_server(self) -> None:
        server = self.rollout_server
        url = server is not None and server.startswith(("http://", "https://"))
        require(server is None or server in SERVER_KINDS or url,
                f"rollout_server must be one of {', '.join(SERVER_KINDS)} or an http(s) URL, got {server!r}",
                setting="rollout_server", value=server)
        engine_url = self.rollout_server_url
        require(engine_url is None or server in ("vllm", "sglang"),
                f"rollout_server_url names a running vllm or sglang server, got it with rollout_server {server!r}",
                setting="rollout_server_url", value=engine_url)
        require(engine_url is None or engine_url.startswith(("http://", "https://")),
                f"rollout_server_url must be an http(s) URL, got {engine_url!r}", setting="rollout_server_url",
                value=engine_url)
        require(self.sync_command is None or url,
                f"sync_command is for a rollout_server URL; {server!r} is given the policy by its own interface, "
                "leave sync_command out", setting="sync_command", value=self.sync_command)
        require(not url or bool(self.sync_command),
                f"a rollout_server URL needs sync_command, got rollout_server {server!r} and no sync_command: the "
                "server must serve the policy being trained, loaded from {model_dir} before every step",
                setting="sync_command", value=self.sync_command)
        require(self.sync_command is None or "{model_dir}" in self.sync_command,
                f"sync_command must name {{model_dir}}, the folder the policy is saved to; got "
                f"{self.sync_command!r}", setting="sync_command", value=self.sync_command)

    @property
    def scored_tools(self) -> frozenset[str] | None:
        """The tools whose results are scored for IG; None: every tool."""
        if self.score_after == "all":
            return None
        return frozenset(t.strip() for t in self.score_after.split(",") if t.strip())


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


def _rollout_figures(rollout: Rollout) -> dict[str, Any]:
    """What the step's metrics need of one rollout (gathered from every process)."""
    return {"outcome": rollout.outcome, "correct": rollout.correct, "turns": len(rollout.turns),
            "gains": [r.value for r in rollout.rewards if r.kind == "information_gain"],
            "well_formed_turns": rollout.well_formed_turns, "tool_calls": rollout.tool_calls,
            "failed": rollout.failure is not None,
            "generated": sum(s.trained_tokens for s in rollout.sequences)}


def _step_metrics(figures: Sequence[dict[str, Any]], rollout_s: float) -> dict[str, Any]:
    """The step's rollout metrics from every rollout's ``_rollout_figures``; ``rollout_s`` is the slowest
    process's sampling time (the processes sample at the same time)."""
    count = max(len(figures), 1)
    gains = [gain for f in figures for gain in f["gains"]]
    turns = sum(f["turns"] for f in figures)
    generated = sum(f["generated"] for f in figures)
    return {"reward": round(sum(f["outcome"] for f in figures) / count, 4),
            "accuracy": round(sum(f["correct"] for f in figures) / count, 4),
            "ig_mean": round(sum(gains) / len(gains), 6) if gains else None, "ig_count": len(gains),
            "well_formed_turns": round(sum(f["well_formed_turns"] for f in figures) / max(turns, 1), 4),
            "tool_calls": round(sum(f["tool_calls"] for f in figures) / count, 3),
            "failures": sum(f["failed"] for f in figures),
            "rollout_tokens_per_s": round(generated / rollout_s, 1) if rollout_s else None}


def _check_distribution(accelerator: Any) -> None:
    """IGPO runs on several processes under DDP only.

    Raises:
        ValueError: FSDP or DeepSpeed on more than one process.
    """
    kind = str(accelerator.distributed_type.value)
    if accelerator.num_processes > 1 and kind in ("FSDP", "DEEPSPEED"):
        raise ValueError(f"IGPO on {accelerator.num_processes} processes runs under DDP (accelerate launch "
                         f"--multi_gpu), not {kind}: sharded weights make every forward pass of the policy a "
                         "collective, and the rollouts and information-gain scoring run a different number of "
                         "forward passes on each process")


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
    from accelerate.utils import gather_object, set_seed
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from venus_edge.agent import AgentConfig
    from venus_edge.engines.base import SamplingParams
    from venus_edge.eval.data import load_examples
    from venus_edge.train.hf_engine import TransformersEngine

    for folder in config.corpus:
        if not Path(folder).is_dir():
            raise FileNotFoundError(f"corpus folder {folder} does not exist")
    examples = [e for source in config.questions for e in load_examples(source).examples]
    if not examples:
        raise ValueError(f"no question in {', '.join(config.questions)}")
    accelerator = Accelerator()
    _check_distribution(accelerator)
    set_seed(config.seed)
    output_dir = Path(config.output_dir)
    dtype = getattr(torch, config.dtype)
    check_model_source(config.model)
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    model = AutoModelForCausalLM.from_pretrained(config.model, dtype=dtype)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    optimizer = adamw(model, learning_rate=config.learning_rate, betas=config.adam_betas,
                      weight_decay=config.weight_decay)
    model, optimizer = accelerator.prepare(model, optimizer)
    reference = reference.to(accelerator.device)
    # The questions' text is part of it: the same file rewritten with other questions is another run.
    run_fingerprint = fingerprint(config, _RESUME_SETTINGS, questions_sha256=json_digest(
        [[example.id, example.question, list(example.answers)] for example in examples]))
    start = resume(accelerator, output_dir, run_fingerprint, total_steps=config.steps)
    # The system prompt carries the date: a run resumed on a later day must keep the date it started with.
    date_file = output_dir / "run_date.txt"
    if accelerator.is_main_process:  # the main process alone writes; the others read once it is done
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
        if start == 0 or not date_file.is_file():
            date_file.write_text(Date.today().isoformat() + "\n")
        for name in ("log.jsonl", "rollouts.jsonl"):  # rows of steps after the checkpoint are redone: drop them
            if torn := trim_step_log(output_dir / name, start):
                accelerator.print(f"{output_dir / name}: dropped {torn} unreadable line(s) (torn by a kill?)")
    accelerator.wait_for_everyone()
    today = Date.fromisoformat(date_file.read_text().strip())
    if start >= config.steps:
        final = output_dir / "final"
        if not (final / "config.json").is_file():  # stopped after its last checkpoint, before the final save
            final = save_final(accelerator, model, tokenizer, output_dir)
        return IGPOResult(start, start, final if final.is_dir() else None, {},
                          str(accelerator.distributed_type.value))

    policy = accelerator.unwrap_model(model)
    local_engine = TransformersEngine(policy, tokenizer, n_ctx=config.n_ctx) if not config.rollout_server else None
    server = SharedRolloutServer(config, output_dir / "rollout-policy", accelerator) if config.rollout_server \
        else None
    tools = _ToolsPerThread(config)
    pool = ThreadPoolExecutor(config.rollout_concurrency) if server is not None and config.rollout_concurrency > 1 \
        else None
    sampling = SamplingParams(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k,
                              presence_penalty=config.presence_penalty, max_tokens=config.max_tokens, logprobs=True)
    last: dict[str, Any] = {}
    bar = ProgressBar(config.steps, start, enabled=progress and accelerator.is_main_process, label="igpo",
                    figure="reward")
    try:
        with bar:
            for step in range(start, config.steps):
                started = time.perf_counter()
                drawn = random.Random(config.seed * 1_000_003 + step).sample(
                    examples, min(config.questions_per_step, len(examples)))
                # this process's share: whole groups, question q on process q mod N (group normalization stays local)
                mine = [(q, example) for q, example in enumerate(drawn)
                        if q % accelerator.num_processes == accelerator.process_index]
                policy.eval()
                served = server.serve(policy, tokenizer) if server is not None else None
                if local_engine is not None:
                    local_engine.forget_cache()
                sampling_started = time.perf_counter()  # the server's weight sync is not rollout time

                # rollout reads this step's `step` and `served` (B023): every call finishes within the step
                def rollout(job: tuple[int, int, Any]) -> Rollout:
                    q, g, example = job
                    # the agent samples turn k with seed + k: rollouts' seeds lie max_turns + 2 apart
                    rollout_seed = ((config.seed * 7919 + step) * 100_003 + q * config.group_size + g) * (  # noqa: B023
                        config.max_turns + 2)
                    agent_config = AgentConfig(max_turns=config.max_turns, max_retries=1, sampling=sampling,
                                               seed=rollout_seed, today=today,
                                               answer_reserve_tokens=None,  # scaled to the window
                                               observation_style=observation_style(config.observation_style))
                    engine = local_engine if served is None else RecordingEngine(served)  # noqa: B023
                    return run_rollout(
                        engine, tools.get(), example.question, example.answers,
                        group=f"{q}:{example.id}", agent_config=agent_config, outcome_metric=config.outcome_metric,
                        model=policy if config.information_gain else None,
                        encode=tokenizer if config.information_gain else None,
                        information_gain=config.information_gain, score_after=config.scored_tools,
                        ig_kind=config.ig_kind, format_penalty=config.format_penalty)

                jobs = [(q, g, example) for q, example in mine for g in range(config.group_size)]
                rollouts = list(pool.map(rollout, jobs)) if pool is not None else [rollout(job) for job in jobs]
                rollout_s = time.perf_counter() - sampling_started
                logprob_gap = _recompute_old_logprobs(policy, rollouts, accelerator.device) if served else None
                metrics = _update(config, model, reference, optimizer, accelerator, rollouts)
                check_finite(step + 1, output_dir=output_dir, policy_loss=metrics["pg_loss"], kl=metrics["kl"],
                             grad_norm=metrics["grad_norm"])
                check_finite_weights(step + 1, model, output_dir=output_dir)
                # every process's rollouts, in the one-process order (question, then rollout), on every process
                shares = gather_object([(rollout_s, logprob_gap, [
                    (q * config.group_size + g, _rollout_record(step + 1, r), _rollout_figures(r))
                    for (q, g, _), r in zip(jobs, rollouts)])])
                everything = sorted((row for _, _, rows in shares for row in rows), key=lambda row: row[0])
                gaps = [gap for _, gap, _ in shares if gap is not None]
                last = {"step": step + 1,
                        **_step_metrics([figures for _, _, figures in everything],
                                        max(seconds for seconds, _, _ in shares)),
                        **metrics, "server_logprob_gap": max(gaps) if gaps else None,
                        "step_s": round(time.perf_counter() - started, 2)}
                if accelerator.is_main_process:
                    with (output_dir / "log.jsonl").open("a", encoding="utf-8") as log:
                        log.write(json.dumps(last) + "\n")
                    with (output_dir / "rollouts.jsonl").open("a", encoding="utf-8") as out:
                        out.writelines(json.dumps(record) + "\n" for _, record, _ in everything)
                bar.update(step + 1, last["reward"], last["rollout_tokens_per_s"] or 0.0)
                if (step + 1) % config.save_every == 0 or step + 1 == config.steps:
                    save_checkpoint(accelerator, output_dir, step + 1, run_fingerprint, config.keep_checkpoints)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        tools.close()
        if server is not None:
            server.close()
    final_dir = save_final(accelerator, model, tokenizer, output_dir)
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
            tools = default_tools(list(self._config.corpus), search_results=self._config.search_results,
                                  observation_style=observation_style(self._config.observation_style))
            self._local.tools = tools
            with self._lock:
                self._made.append(tools)
        return tools

    def close(self) -> None:
        from venus_edge.toolbox import close_tools

        for tools in self._made:
            close_tools(tools)
        self._made.clear()


def _update(config: IGPOConfig, model: Any, reference: Any, optimizer: Any, accelerator: Any,
            rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """One optimizer step over every trained token of the step's rollouts (token-mean over the whole batch).

    Under ``accelerate launch`` each process passes its own rollouts (whole groups); the batch is every
    process's. Every process reaches the same collectives, in the same order, with any number of rollouts
    (none included): the advantage sums, the token and pass counts, one backward pass that synchronizes the
    gradients (DDP averages them over the processes: each loss is scaled by the process count to undo it), and
    the metric sums. Every process runs as many forward and backward passes as the busiest one (the others' are
    weightless), so that a step is the same sequence of collectives on each.
    """
    import torch

    def reduce_sums(values: list[float]) -> list[float]:
        summed = accelerator.reduce(torch.tensor(values, dtype=torch.float64, device=accelerator.device), "sum")
        return [float(x) for x in summed.tolist()]

    advantages, stats = igpo_advantages([r.rewards for r in rollouts], [r.group for r in rollouts],
                                        normalization=config.normalization, gamma=config.gamma,
                                        reduce_sums=reduce_sums)
    work = []
    for rollout, returns in zip(rollouts, advantages):
        per_turn = turn_advantages(returns, len(rollout.turns))
        for sequence in rollout.sequences:
            turn_of = sequence.turn_of[1:]
            values = [per_turn[t] if 0 <= t < len(per_turn) else 0.0 for t in turn_of]
            mask = [1.0 if t >= 0 else 0.0 for t in turn_of]
            work.append((sequence.ids, values, mask, sequence.old_logprobs[1:]))
    local_tokens = sum(sum(mask) for _, _, mask, _ in work)
    counts = accelerator.gather(torch.tensor([local_tokens, len(work)], dtype=torch.float64,
                                             device=accelerator.device)).reshape(-1, 2)  # (processes, 2)
    total, passes = float(counts[:, 0].sum()), int(counts[:, 1].max())
    processes = accelerator.num_processes
    model.train()
    device = accelerator.device
    summed = {"pg_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "dual_clip_fraction": 0.0}
    for index in range(passes):  # none anywhere: no pass, and the optimizer step leaves the weights alone
        context = accelerator.no_sync(model) if index < passes - 1 else contextlib.nullcontext()
        if index >= len(work):  # nothing left here: a weightless pass, so that the collectives line up
            with context:
                accelerator.backward(model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device))
                                     .logits.sum() * 0.0)
            continue
        ids, values, mask, old = work[index]
        with torch.no_grad():
            ref = _sequence_logprobs(reference, ids, device)
        with context:
            logprobs = _sequence_logprobs(model, ids, device)
            weights = torch.tensor(mask, device=device)
            loss, parts = policy_loss(logprobs, torch.tensor(old, device=device), torch.tensor(values, device=device),
                                      weights, clip=config.clip, clip_high=config.clip_high,
                                      dual_clip=config.dual_clip, ref_logprobs=ref, kl_coef=config.kl_coef)
            share = parts["tokens"] / max(total, 1.0)  # token-mean over the whole batch, not per sequence
            accelerator.backward(loss * share * processes)
        for key in summed:
            summed[key] += parts[key] * share
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm) if passes else None
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    summed = dict(zip(summed, reduce_sums(list(summed.values()))))
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
    if not end_processes():  # one summary line per run, not one per process
        return 0
    print(json.dumps({"steps": result.steps, "resumed_from": result.resumed_from,
                      "final": str(result.final_dir) if result.final_dir else None, **result.last}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
