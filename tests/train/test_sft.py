"""SFT machinery at CI size: the toy world's oracle trajectories, cleaned, a tiny Qwen3 with a small BPE, a few
optimizer steps with the recipe's loss, a kill and a resume, LoRA, the export through quantize/ and a research
session on the exported GGUF."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from venus_edge.cli import main as cli
from venus_edge.train.data import load_samples
from venus_edge.train.sft import SFTConfig, length_grouped_batches, train_sft, trained_added_tokens


@pytest.fixture(scope="module")
def toy(tmp_path_factory, make_toy) -> Path:
    """A small toy world, its cleaned trajectories and a random tiny model (hidden 64, 2 layers, 600 tokens)."""
    out = tmp_path_factory.mktemp("toy")
    make_toy(out, people=16, seed=1, tokenizer_texts=("sft.jsonl", "world/corpus"))
    return out


def config(toy: Path, out: str, **settings) -> SFTConfig:
    values = {"model": str(toy / "base"), "data": [str(toy / "sft.jsonl")], "output_dir": str(toy / out),
              "global_batch_size": 4, "micro_batch_size": 2, "learning_rate": 3e-3, "warmup_ratio": 0.0,
              "gradient_checkpointing": False, **settings}
    return SFTConfig.from_dict(values)


def weights(folder: Path) -> dict:
    """Every tensor of a checkpoint folder's safetensors shards, by name (numpy)."""
    from safetensors.numpy import load_file

    found: dict = {}
    for shard in folder.glob("*.safetensors"):
        found |= load_file(str(shard))
    return found


def log(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def test_the_oracle_trajectories_are_clean_samples(toy):
    samples = load_samples([toy / "sft.jsonl"]).samples
    questions = [json.loads(line) for line in (toy / "world" / "questions-train.jsonl").read_text().splitlines()]
    assert len(samples) == len(questions) > 20
    by_question = {q["question"]: q["answer"] for q in questions}
    for sample in samples:
        assert sample.messages[-1]["content"].endswith(f"<answer>\n{by_question[sample.question]}\n</answer>")
        assert sample.turns in (3, 5)  # search, visit, answer; or twice search and visit for two hops


def test_a_few_steps_lower_the_loss_and_export_a_model_that_runs(toy, tmp_path):
    """Twelve steps at a high learning rate: the token-mean loss of a random model falls (6.4 -> 5.2 here); the
    final checkpoint converts to GGUF and drives a research session over the toy corpus."""
    settings = config(toy, "run-overfit", epochs=12 * 4 / len(load_samples([toy / "sft.jsonl"]).samples),
                      save_every=100)
    result = train_sft(settings, progress=False)
    losses = [row["loss"] for row in log(toy / "run-overfit")]
    assert result.final_dir is not None and (result.final_dir / "config.json").is_file()
    assert all(math.isfinite(loss) for loss in losses) and len(losses) == result.steps
    assert losses[-1] < 0.9 * losses[0], losses
    assert result.trained_tokens > 0 and result.tokens_per_s > 0
    again = train_sft(settings, progress=False)  # a finished run, run again: nothing to do, nothing lost
    assert (again.steps, again.resumed_from, again.final_dir) == (result.steps, result.steps, result.final_dir)
    assert again.last_loss == losses[-1] and len(log(toy / "run-overfit")) == len(losses)

    gguf_dir = tmp_path / "gguf"
    assert cli(["quantize", str(result.final_dir), "--types", "Q8_0", "--out", str(gguf_dir), "--quiet",
                "--agentic-tokens", "0"]) == 0
    [gguf] = sorted(gguf_dir.glob("*Q8_0*.gguf"))
    question = json.loads((toy / "world" / "questions-heldout.jsonl").read_text().splitlines()[0])["question"]
    journal = tmp_path / "research.jsonl"
    code = cli(["research", question, "--model", str(gguf), "--corpus", str(toy / "world" / "corpus"),
                "--extractive-visit", "--max-turns", "2", "--max-tokens", "48", "--n-ctx", "4096", "--temperature",
                "0", "--quiet", "--out", str(journal)])
    assert code in (0, 1)  # answered or not: the machinery ran the exported model end to end
    assert journal.read_text().count('"record": "turn"') >= 1


def test_a_killed_run_resumes_from_its_checkpoint_with_the_same_weights(toy, tmp_path):
    """Kill a run after its second checkpoint; the rerun resumes there and ends with the weights of a run that was
    never interrupted."""
    def write(name: str, steps: int | None) -> Path:
        path = tmp_path / f"{name}.yaml"
        values = {**config(toy, name).to_dict(), "output_dir": str(tmp_path / name), "save_every": 2,
                  "keep_checkpoints": 5, "epochs": 3.0}
        if steps:
            values["max_steps"] = steps
        path.write_text(json.dumps(values))
        return path

    command = [sys.executable, "-m", "venus_edge.train.sft", "--quiet"]
    killed = subprocess.Popen([*command, str(write("killed", None))], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True)
    checkpoint = tmp_path / "killed" / "checkpoints" / "step-000004" / "state.json"
    deadline = time.monotonic() + 300
    while not checkpoint.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert checkpoint.exists(), killed.stderr.read().decode()[-2000:]
    done = [int(p.name[5:11]) for p in (tmp_path / "killed" / "checkpoints").glob("step-??????")]
    steps = max(done) + 2
    resumed = subprocess.run([*command, "--max-steps", str(steps), str(write("killed", None))],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout.splitlines()[-1])["resumed_from"] == max(done)
    straight = subprocess.run([*command, str(write("straight", steps))], capture_output=True, text=True, timeout=300)
    assert straight.returncode == 0, straight.stderr[-2000:]
    name = f"step-{steps:06d}"
    a, b = weights(tmp_path / "killed" / "checkpoints" / name), weights(tmp_path / "straight" / "checkpoints" / name)
    assert a, "the checkpoints hold the model's weights"
    assert a.keys() == b.keys()
    for key in a:
        assert abs(a[key] - b[key]).max() <= 1e-6, key
    rows = log(tmp_path / "killed")  # the steps the kill made redo are logged once
    assert [r["step"] for r in rows] == list(range(1, steps + 1))


def test_lora_trains_adapters_and_merges_them(toy):
    settings = config(toy, "run-lora", lora={"r": 4, "alpha": 8}, max_steps=None,
                      epochs=2 * 4 / len(load_samples([toy / "sft.jsonl"]).samples))
    result = train_sft(settings, progress=False)
    merged, base = weights(result.final_dir), weights(toy / "base")
    assert not any("lora" in key for key in merged), "adapters are merged into the weights"
    changed = [k for k in base if k.endswith("q_proj.weight") and abs(merged[k] - base[k]).max() > 0]
    assert changed, "the merged projections differ from the base"
    assert all(abs(merged[k] - base[k]).max() == 0 for k in base if k.endswith("norm.weight"))
    # the added tokens the protocol trains (<tool_call>, </think>, <|im_end|>, ...) get their own embedding rows
    # trained; every other row, and every untrained added token's, stays the base's
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(toy / "base")
    trained = trained_token_ids(toy, tokenizer)
    assert {tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>", "</think>")} <= trained
    assert trained <= set(tokenizer.added_tokens_decoder)
    assert changed_rows(merged, base, "model.embed_tokens.weight") == trained


def trained_token_ids(toy: Path, tokenizer) -> set[int]:
    from venus_edge.train.tokenize import tokenize_samples

    tokenized, _ = tokenize_samples(load_samples([toy / "sft.jsonl"]).samples, tokenizer)
    return set(trained_added_tokens(tokenized, tokenizer))


def changed_rows(merged: dict, base: dict, key: str) -> set[int]:
    return {i for i in range(base[key].shape[0]) if abs(merged[key][i] - base[key][i]).max() > 0}


def test_lora_trains_the_output_rows_of_an_untied_model_too(toy, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(toy / "base")
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    tokenizer = AutoTokenizer.from_pretrained(toy / "base")
    model.save_pretrained(tmp_path / "untied")
    tokenizer.save_pretrained(tmp_path / "untied")
    settings = config(toy, "run-lora-untied", model=str(tmp_path / "untied"), lora={"r": 4, "alpha": 8},
                      epochs=4 / len(load_samples([toy / "sft.jsonl"]).samples))
    merged, base = weights(train_sft(settings, progress=False).final_dir), weights(tmp_path / "untied")
    assert "lm_head.weight" in base, "the fixture is untied"
    trained = trained_token_ids(toy, tokenizer)
    assert changed_rows(merged, base, "model.embed_tokens.weight") == trained
    assert changed_rows(merged, base, "lm_head.weight") == trained


def test_lora_can_leave_the_embeddings_alone(toy):
    settings = config(toy, "run-lora-frozen-embeddings", lora={"r": 4, "alpha": 8, "train_added_tokens": False},
                      epochs=4 / len(load_samples([toy / "sft.jsonl"]).samples))
    result = train_sft(settings, progress=False)
    merged, base = weights(result.final_dir), weights(toy / "base")
    assert not changed_rows(merged, base, "model.embed_tokens.weight")


def test_length_grouped_batches_cover_every_sample_once_per_epoch_and_are_seeded():
    lengths = [5, 300, 7, 290, 6, 310, 8, 305, 9]
    batches = length_grouped_batches(lengths, 2, seed=0)
    assert sorted(i for batch in batches for i in batch) == list(range(9))
    # one mega-batch sorted by length: micro-batches are neighbours in length, padded little
    grouped = sorted(sorted(lengths[i] for i in batch) for batch in batches)
    assert grouped == [[5], [6, 7], [8, 9], [290, 300], [305, 310]]
    assert batches == length_grouped_batches(lengths, 2, seed=0)
    assert batches != length_grouped_batches(lengths, 2, seed=1)
    one_and_a_half = [i for batch in length_grouped_batches(lengths, 2, seed=0, epochs=1.5) for i in batch]
    assert len(one_and_a_half) == 9 + 4 and sorted(set(one_and_a_half)) == list(range(9))


@pytest.mark.parametrize(("settings", "message"), [
    ({"global_batch_size": 5, "micro_batch_size": 2}, "not a multiple"),
    ({"lerning_rate": 1e-5}, "unknown setting"),
    ({"dtype": "int8"}, "dtype"),
    ({"lora": {"rank": 4}}, "unknown lora setting"),
    ({"lora": "yes_please"}, "lora: expected true, false or a mapping"),
    ({"lora": ["q_proj"]}, "lora: expected true, false or a mapping"),
    ({"lora": {"train_added_tokens": "yes"}}, "expected true or false"),
    ({"learning_rate": "fast"}, "learning_rate"),
    ({"global_batch_size": 2.5}, "whole number"),
    ({"epochs": "one"}, "epochs"),
    ({"adam_betas": 0.9}, "two numbers"),
    ({"adam_betas": [0.9, 0.95, 0.99]}, "two numbers"),
    ({"adam_betas": [0.9, 1.5]}, r"\[0, 1\)"),
    ({"gradient_checkpointing": "false"}, "true or false"),
    ({"max_steps": 0}, "max_steps must be >= 1"),
    ({"data": 5}, "a file or a list of files"),
    ({"data": []}, "missing required"),
    ({"learning_rate": float("inf")}, "finite"),  # YAML's .inf
    ({"learning_rate": "1e400"}, "finite"),
    ({"max_grad_norm": float("nan")}, "finite"),  # YAML's .nan: every comparison with it is False
    ({"seed": "1e400"}, "finite"),  # int() of it raised OverflowError
    ({"learning_rate": 10**400}, "finite"),
    ({"epochs": 1e9}, r"epochs must lie in \(0, 1,000\]"),  # drew 1e9 passes of batches before a step
])
def test_bad_configs_are_errors(settings, message):
    with pytest.raises(ValueError, match=message):
        SFTConfig.from_dict({"model": "m", "data": ["d.jsonl"], "output_dir": "o", **settings})


def test_whole_number_settings_are_kept_exactly():
    """A seed past 2**53 went through float() and came back another number."""
    settings = SFTConfig.from_dict({"model": "m", "data": ["d.jsonl"], "output_dir": "o", "seed": 2**53 + 1})
    assert settings.seed == 2**53 + 1


def test_values_yaml_reads_as_strings_are_converted(tmp_path):
    """PyYAML reads 1e-5 (no dot) as a string; a lone target module is a list of one."""
    (tmp_path / "cfg.yaml").write_text("model: m\ndata: d.jsonl\noutput_dir: o\nlearning_rate: 1e-5\n"
                                       "global_batch_size: '16'\nlora: {target_modules: q_proj, r: 8}\n")
    loaded = SFTConfig.from_file(tmp_path / "cfg.yaml")
    assert loaded.learning_rate == 1e-5 and loaded.global_batch_size == 16
    assert loaded.lora.target_modules == ("q_proj",) and loaded.lora.r == 8
    (tmp_path / "bad.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ValueError, match="not YAML or JSON"):
        SFTConfig.from_file(tmp_path / "bad.yaml")
    (tmp_path / "latin1.yaml").write_bytes("model: caf\u00e9\n".encode("latin-1"))  # the codec's error named no file
    with pytest.raises(ValueError, match=rf"{tmp_path / 'latin1.yaml'}: not UTF-8 text \(byte 10\)"):
        SFTConfig.from_file(tmp_path / "latin1.yaml")


@pytest.mark.parametrize("path", sorted(Path(__file__).parents[2].joinpath("configs", "sft").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_the_shipped_configs_load(path):
    loaded = SFTConfig.from_file(path)
    assert loaded.data and Path(loaded.output_dir).is_absolute()


def test_a_config_file_resolves_paths_next_to_it(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "cfg.yaml").write_text("model: base\ndata: sft.jsonl\noutput_dir: run\nlora: true\n")
    loaded = SFTConfig.from_file(tmp_path / "cfg.yaml", max_steps=3)
    assert loaded.model == str(tmp_path / "base") and loaded.data == (str(tmp_path / "sft.jsonl"),)
    assert loaded.output_dir == str(tmp_path / "run") and loaded.max_steps == 3 and loaded.lora.r == 16
    (tmp_path / "hub.yaml").write_text("model: inclusionAI/DR-Venus-4B-SFT\ndata: [a.jsonl]\noutput_dir: /x\n")
    assert SFTConfig.from_file(tmp_path / "hub.yaml").model == "inclusionAI/DR-Venus-4B-SFT"
    # a command-line --output-dir is taken as given (relative to the working directory), not to the file
    assert SFTConfig.from_file(tmp_path / "cfg.yaml", output_dir="runs/x").output_dir == "runs/x"


@pytest.mark.parametrize("launch_config", ["cpu.yaml", "fsdp.yaml", "deepspeed_zero3.yaml"])
def test_the_accelerate_configs_start_on_one_cpu_process(toy, tmp_path, launch_config):
    """`accelerate launch` with each shipped config runs a step on one CPU process. (On a CPU accelerate runs the
    FSDP config as a plain process: its sharding needs GPUs. DeepSpeed needs its package.)"""
    if launch_config.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    path = tmp_path / "smoke.json"
    settings = {**config(toy, "unused").to_dict(), "output_dir": str(tmp_path / "run"), "max_steps": 1}
    path.write_text(json.dumps(settings))
    configs = Path(__file__).parents[2] / "configs" / "accelerate"
    done = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                           str(configs / launch_config), "--num_processes", "1", "-m", "venus_edge.train.sft",
                           "--quiet", str(path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1])["steps"] == 1


def test_a_model_read_from_a_gguf_file_saves_plain_weights(toy, tmp_path):
    """transformers marks a model it dequantized from a GGUF as quantized and refuses to save it; the final
    checkpoint drops the marker (the weights are plain floats)."""
    from types import SimpleNamespace

    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from venus_edge.train.checkpoints import save_final

    model = AutoModelForCausalLM.from_pretrained(toy / "base")
    model.hf_quantizer = SimpleNamespace(quantization_config=SimpleNamespace(quant_method="gguf"),
                                         is_serializable=lambda: False)
    with pytest.raises(ValueError, match="not serializable"):
        model.save_pretrained(tmp_path / "refused")
    final = save_final(Accelerator(cpu=True), model, AutoTokenizer.from_pretrained(toy / "base"), tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(final)
    assert all((a == b).all() for a, b in zip(reloaded.state_dict().values(), model.state_dict().values()))


def test_a_run_stopped_before_its_final_save_writes_it_on_the_rerun(toy):
    import shutil

    result = train_sft(config(toy, "final-save", epochs=0.2, save_every=1), progress=False)
    assert result.final_dir is not None
    shutil.rmtree(result.final_dir)
    again = train_sft(config(toy, "final-save", epochs=0.2, save_every=1), progress=False)
    assert again.resumed_from == result.steps and (again.final_dir / "config.json").is_file()


def test_a_run_killed_while_saving_its_final_model_saves_it_again(toy, monkeypatch):
    """``final/`` was written in place: a kill after its config.json left a folder without weights, which the rerun
    took for a finished run ("nothing to train"). It is written to final.tmp and renamed once whole."""
    from transformers import PreTrainedTokenizerBase

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # stands for the kill, after the model files were written

    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", killed)
    with pytest.raises(KeyboardInterrupt):
        train_sft(config(toy, "final-killed", epochs=0.2, save_every=1), progress=False)
    assert not (toy / "final-killed" / "final").exists()
    monkeypatch.undo()
    again = train_sft(config(toy, "final-killed", epochs=0.2, save_every=1), progress=False)
    assert (again.final_dir / "model.safetensors").is_file() and (again.final_dir / "tokenizer.json").is_file()
    assert weights(again.final_dir)
    before = (again.final_dir / "model.safetensors").stat().st_ino
    train_sft(config(toy, "final-killed", epochs=0.2, save_every=1), progress=False)  # finished: kept as it is
    assert (again.final_dir / "model.safetensors").stat().st_ino == before


def test_a_resume_onto_other_data_under_the_same_path_is_refused(toy, tmp_path):
    """The fingerprint held the data's path and sample count only: the same file rewritten with other answers
    resumed the old run and mixed the two. The data's tokens are in it now."""
    data = tmp_path / "data.jsonl"
    data.write_text((toy / "sft.jsonl").read_text())
    settings = config(toy, "other-data", data=[str(data)], output_dir=str(tmp_path / "run"), max_steps=1)
    train_sft(settings, progress=False)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    for row in rows:
        row["messages"][-1]["content"] = row["messages"][-1]["content"].replace("<answer>\n", "<answer>\nNot ")
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ValueError, match="written by another config or data"):
        train_sft(SFTConfig.from_dict({**settings.to_dict(), "max_steps": 2}), progress=False)


def test_a_checkpoint_from_before_the_data_digest_still_resumes(toy, tmp_path):
    settings = config(toy, "old-fingerprint", output_dir=str(tmp_path / "run"), max_steps=1, save_every=1)
    train_sft(settings, progress=False)
    [state_file] = (tmp_path / "run" / "checkpoints").glob("step-*/state.json")
    state = json.loads(state_file.read_text())
    written = json.loads(state["fingerprint"])
    del written["data_sha256"]
    state_file.write_text(json.dumps({**state, "fingerprint": json.dumps(written, sort_keys=True)}))
    again = train_sft(SFTConfig.from_dict({**settings.to_dict(), "max_steps": 2}), progress=False)
    assert again.resumed_from == 1 and again.steps == 2


def test_a_final_update_to_weights_that_are_not_finite_is_not_saved(toy, tmp_path):
    """A finite loss and gradient norm can still step the weights to inf (learning rate 1e37 on a one-step run):
    the run ended with exit 0 and a final model whose logits were all 0."""
    settings = config(toy, "inf-weights", output_dir=str(tmp_path / "run"), learning_rate=1e37, global_batch_size=24,
                      micro_batch_size=24, epochs=0.5)
    with pytest.raises(ValueError, match=r"step \d+: the (loss|grad norm|weight .*) is (nan|inf).*diverged"):
        train_sft(settings, progress=False)
    assert not (tmp_path / "run" / "final").exists()


def test_a_diverging_run_stops_before_it_saves_nan_weights(toy, tmp_path):
    """learning_rate 1e30: the loss went NaN at step 3, training went on, and NaN checkpoints replaced the good
    ones; the run printed "last loss nan" and exited 0."""
    import numpy as np

    settings = config(toy, "diverged", output_dir=str(tmp_path / "run"), learning_rate=1e30, save_every=1,
                      keep_checkpoints=100)
    with pytest.raises(ValueError, match=r"step \d+: the (loss|grad norm) is (nan|inf).*training diverged"):
        train_sft(settings, progress=False)
    for checkpoint in (tmp_path / "run" / "checkpoints").glob("step-*"):
        assert all(np.isfinite(tensor).all() for tensor in weights(checkpoint).values()), checkpoint
    assert all(math.isfinite(row["loss"]) for row in log(tmp_path / "run"))
    assert not (tmp_path / "run" / "final").exists()


def test_a_torn_log_line_does_not_stop_the_resume(toy, tmp_path):
    """A kill in the middle of a log write left a torn last line; the resume's trimming parsed every line and
    stopped there ("Unterminated string"), naming no file, until the file was edited by hand."""
    settings = config(toy, "torn-log", output_dir=str(tmp_path / "run"), max_steps=2, save_every=1)
    train_sft(settings, progress=False)
    with (tmp_path / "run" / "log.jsonl").open("a") as handle:
        handle.write('{"step": 3, "loss": 1.2')  # torn
    again = train_sft(SFTConfig.from_dict({**settings.to_dict(), "max_steps": 3}), progress=False)
    assert again.resumed_from == 2 and [row["step"] for row in log(tmp_path / "run")] == [1, 2, 3]


def test_a_damaged_checkpoint_is_named_with_what_to_do(toy, tmp_path):
    """A checkpoint whose model file a failing disk cut short was a SafetensorError traceback at the resume."""
    settings = config(toy, "damaged", output_dir=str(tmp_path / "run"), max_steps=1, save_every=1)
    train_sft(settings, progress=False)
    [checkpoint] = (tmp_path / "run" / "checkpoints").glob("step-*")
    for weights_file in checkpoint.glob("*.safetensors"):
        weights_file.write_bytes(weights_file.read_bytes()[:100])
    with pytest.raises(ValueError, match=rf"{checkpoint} cannot be loaded into this run .*damaged, remove that"):
        train_sft(SFTConfig.from_dict({**settings.to_dict(), "max_steps": 2}), progress=False)
    (checkpoint / "state.json").write_text("[9]")
    with pytest.raises(ValueError, match=rf"{checkpoint / 'state.json'} is not a checkpoint's state"):
        train_sft(SFTConfig.from_dict({**settings.to_dict(), "max_steps": 2}), progress=False)


def test_a_tokenizer_with_more_tokens_than_the_model_has_rows_is_named(toy, tmp_path):
    """``tokenizer:`` another model's tokenizer: an IndexError deep in the embedding lookup."""
    from venus_edge.train.tinymodel import write_tiny_model

    bigger = write_tiny_model([toy / "sft.jsonl"], tmp_path / "bigger", vocab=1024, hidden=16, layers=1)
    with pytest.raises(ValueError, match=r"the tokenizer gives token id [\d,]+ but the model .* has 640 embedding"):
        train_sft(config(toy, "wrong-tokenizer", output_dir=str(tmp_path / "run"), tokenizer=str(bigger)),
                  progress=False)


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_file_or_link_named_final_is_replaced_not_followed(toy, tmp_path, kind):
    """A file or a link at final/ made every save fail (NotADirectoryError), and a link's folder was renamed away."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    final = tmp_path / "run" / "final"
    final.parent.mkdir()
    if kind == "file":
        final.write_text("x")
    else:
        final.symlink_to(elsewhere)
    result = train_sft(config(toy, "final-kind", output_dir=str(tmp_path / "run"), epochs=0.2), progress=False)
    assert result.final_dir == final and (final / "config.json").is_file() and not final.is_symlink()
    assert (elsewhere / "keep.txt").read_text() == "mine"
