"""One IGPO update (``igpo_trainer._update``) on hand-made rollouts, run by ``test_distributed.py`` on one process
and under ``accelerate launch`` on two: ``python dp_update_check.py MODEL_DIR OUT_DIR [QUESTIONS]``.

Three questions of two rollouts each, of different lengths, with information-gain and outcome rewards chosen so that
every group has non-zero advantages and each process alone would find another ``scaled_separate`` scale (question 2
has equal outcomes: its normalized outcomes are 0). Process p takes the questions q with q mod N = p, as the trainer
does. A plain SGD step (its update is proportional to the gradient, unlike Adam's) makes any error in the loss scale
visible in the weights. With QUESTIONS 1 (the first question only) the second process has no rollout and must
still reach every collective. The main process writes ``OUT_DIR/weights.safetensors`` and ``OUT_DIR/metrics.json``.
"""

from __future__ import annotations

import copy
import json
import random
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from venus_edge.train.checkpoints import end_processes
from venus_edge.train.igpo import TurnReward
from venus_edge.train.igpo_rollout import Rollout, TrainingSequence
from venus_edge.train.igpo_trainer import IGPOConfig, _sequence_logprobs, _update

#: per question, per rollout: (IG values of its tool-call turns, outcome); the last turn is the answer turn
REWARDS = [
    [([0.5], 1.0), ([-0.2], 0.0)],
    [([0.1, 0.9, -0.4], 0.0), ([0.3, 0.0, 0.2], 1.0)],
    [([1.5, -1.0], 0.0), ([0.2, 0.4], 0.0)],
]


def make_rollout(model: torch.nn.Module, question: int, index: int, vocab: int) -> Rollout:
    gains, outcome = REWARDS[question][index]
    rng = random.Random(question * 10 + index)
    sequence = TrainingSequence()
    for turn in range(len(gains) + 1):  # a context (prompt or tool response), then the turn's sampled tokens
        context, sampled = rng.randint(3, 8), rng.randint(2, 6)
        sequence.ids += [rng.randrange(vocab) for _ in range(context + sampled)]
        sequence.turn_of += [-1] * context + [turn] * sampled
    with torch.no_grad():
        own = _sequence_logprobs(model, sequence.ids, "cpu").tolist()
    # old log-probs a little off the policy's, so that some ratios are clipped
    sequence.old_logprobs = [0.0] + [v + (rng.uniform(-0.3, 0.3) if t >= 0 else 0.0)
                                     for v, t in zip(own, sequence.turn_of[1:])]
    sequence.old_logprobs = [v if t >= 0 else 0.0 for v, t in zip(sequence.old_logprobs, sequence.turn_of)]
    rewards = [TurnReward(t, g, "information_gain") for t, g in enumerate(gains)]
    rewards.append(TurnReward(len(gains), outcome, "outcome"))
    turns = [{"kind": "tool_call", "tool": "visit", "format_errors": 0} for _ in gains]
    turns.append({"kind": "answer", "tool": None, "format_errors": 0})
    return Rollout(group=f"{question}:q", question="?", answers=("x",), turns=turns, sequences=[sequence],
                   rewards=rewards, outcome=outcome, correct=outcome == 1.0)


def main(model_dir: str, out_dir: str, questions: int = len(REWARDS)) -> None:
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    vocab = model.config.vocab_size
    mine = [make_rollout(model, q, i, vocab) for q in range(questions) if q % accelerator.num_processes ==
            accelerator.process_index for i in range(len(REWARDS[q]))]
    config = IGPOConfig.from_dict({"model": "m", "questions": ["q"], "corpus": ["c"], "output_dir": "o",
                                   "kl_coef": 0.1, "max_grad_norm": 1e9})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)
    metrics = _update(config, model, reference, optimizer, accelerator, mine)
    if accelerator.is_main_process:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
        save_file(state, str(out / "weights.safetensors"))
        (out / "metrics.json").write_text(json.dumps(metrics))
    end_processes()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(arg) for arg in sys.argv[3:]))
