"""Run configs: built in Python or read from a file, each is converted to its fields' types and checked by its
``__post_init__``; every field carries its help; every shipped config file loads, and every config file the code
and README name exists."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from venus_edge.train.errors import ConfigError
from venus_edge.train.igpo_trainer import IGPOConfig
from venus_edge.train.sft import LoraSettings, SFTConfig

REPO = Path(__file__).parents[2]
SFT_REQUIRED = {"model": "m", "data": ("d.jsonl",), "output_dir": "o"}
IGPO_REQUIRED = {"model": "m", "questions": ("q.jsonl",), "corpus": ("c",), "output_dir": "o"}


@pytest.mark.parametrize(("cls", "settings", "setting", "value"), [
    (SFTConfig, {"warmup_ratio": 1.5}, "warmup_ratio", 1.5),
    (SFTConfig, {"global_batch_size": 5, "micro_batch_size": 2}, "global_batch_size", 5),
    (SFTConfig, {"max_steps": 0}, "max_steps", 0),
    (SFTConfig, {"learning_rate": 0.0}, "learning_rate", 0.0),
    (SFTConfig, {"dtype": "int8"}, "dtype", "int8"),
    (SFTConfig, {"learning_rate": "fast"}, "learning_rate", "fast"),
    (SFTConfig, {"lora": LoraSettings(r=16), "keep_checkpoints": 0}, "keep_checkpoints", 0),
    (IGPOConfig, {"gamma": 1.5}, "gamma", 1.5),
    (IGPOConfig, {"group_size": 0}, "group_size", 0),
    (IGPOConfig, {"clip": 1.2}, "clip", 1.2),
    (IGPOConfig, {"normalization": "mean"}, "normalization", "mean"),
    (IGPOConfig, {"top_p": 0.0}, "top_p", 0.0),
    (IGPOConfig, {"rollout_server": "http://127.0.0.1:8000"}, "sync_command", None),
    (IGPOConfig, {"adam_betas": (0.9, 1.0)}, "adam_betas", (0.9, 1.0)),
    (LoraSettings, {"dropout": 1.0}, "dropout", 1.0),
    (LoraSettings, {"r": 0}, "r", 0),
])
def test_a_config_built_in_python_is_checked(cls, settings, setting, value):
    """``__post_init__`` checks every rule, not only ``from_dict``: the error names the setting and its value."""
    required = {SFTConfig: SFT_REQUIRED, IGPOConfig: IGPO_REQUIRED, LoraSettings: {}}[cls]
    with pytest.raises(ConfigError) as raised:
        cls(**required, **settings)
    assert raised.value.setting == setting and raised.value.value == value
    assert setting in str(raised.value) and (value is None or str(value) in str(raised.value)), str(raised.value)
    assert isinstance(raised.value, ValueError)  # callers that caught ValueError still do


def test_a_broken_nested_setting_names_both_settings():
    with pytest.raises(ConfigError, match=r"lora: dropout must lie in \[0, 1\), got 2.0") as raised:
        SFTConfig(**SFT_REQUIRED, lora={"dropout": 2})
    assert raised.value.setting == "lora"


def test_a_config_built_in_python_is_converted_to_its_fields_types():
    config = SFTConfig(model=Path("base"), data="sft.jsonl", output_dir="run", learning_rate="1e-5", lora=True,
                       adam_betas=[0.9, 0.95])
    assert config.model == "base" and config.data == ("sft.jsonl",) and config.learning_rate == 1e-5
    assert config.lora == LoraSettings() and config.adam_betas == (0.9, 0.95)
    assert SFTConfig(**SFT_REQUIRED, lora=False).lora is None
    assert SFTConfig.from_dict(config.to_dict()) == config  # what a run writes to config.json reads back


def test_required_settings_are_the_fields_without_a_default():
    assert SFTConfig.required_settings() == ("model", "data", "output_dir")
    assert IGPOConfig.required_settings() == ("model", "questions", "corpus", "output_dir")
    with pytest.raises(ConfigError, match=r"missing required setting.s. corpus"):
        IGPOConfig.from_dict({"model": "m", "questions": ["q"], "output_dir": "o"})


@pytest.mark.parametrize("cls", [SFTConfig, IGPOConfig, LoraSettings])
def test_every_setting_carries_its_help(cls):
    missing = [spec.name for spec in dataclasses.fields(cls) if not spec.metadata.get("help")]
    assert not missing, f"{cls.__name__} settings without help: {missing}"
    assert len(cls.help_text().splitlines()) == len(dataclasses.fields(cls))


def _load_accelerate_config(path: Path) -> object:
    from accelerate.commands.config.config_args import load_config_from_file

    return load_config_from_file(str(path))


# The config class of each folder of configs/: a new folder must say how its files load.
LOADERS = {"sft": SFTConfig.from_file, "igpo": IGPOConfig.from_file, "accelerate": _load_accelerate_config}


@pytest.mark.parametrize("path", sorted((REPO / "configs").rglob("*.yaml")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_config_loads_into_its_config_class(path):
    folder = path.relative_to(REPO / "configs").parts[0]
    assert folder in LOADERS, f"configs/{folder}/ has no config class in LOADERS"
    assert LOADERS[folder](path) is not None


def test_every_config_file_the_code_and_readme_name_exists():
    """A docstring, script or README that names ``configs/<part>/<name>.yaml`` names a file that is shipped (and so
    loaded by the test above)."""
    texts = [REPO / "README.md", *sorted(REPO.glob("scripts/*.sh"))]
    texts += [
        p for folder in ("venus_edge", "tools", "quantize", "train") for p in sorted((REPO / folder).rglob("*.py"))
    ]
    named = {name for text in texts for name in re.findall(r"configs/[\w.-]+/[\w.-]+\.yaml", text.read_text())}
    assert "configs/igpo/toy.yaml" in named and "configs/sft/dr-venus-4b.yaml" in named
    missing = sorted(name for name in named if not (REPO / name).is_file())
    assert not missing, f"named but not shipped: {missing}"
