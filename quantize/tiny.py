"""Tiny Qwen3 checkpoints with the real Qwen tokenizer, built from a config for tests and benchmarks.

`Qwen3Config()` holds the Qwen3-4B numbers (the model DR-Venus fine-tunes); `Qwen3Config.tiny()` keeps the
architecture and the 151,936-entry vocabulary but shrinks every width, so a checkpoint is ~80 MB in F32
and converts and loads in seconds.

Usage::

    ckpt = write_tiny_qwen3("ckpt/", config=Qwen3Config.tiny(), seed=0)
    gguf_path = build_tiny_qwen3_gguf("work/", out_type="f32")
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from safetensors.numpy import save_file

from .convert import convert_checkpoint
from .qwen_tokenizer import build_qwen3_tokenizer_files

__all__ = ["Qwen3Config", "build_tiny_qwen3_gguf", "tiny_qwen3_tensor_shapes", "write_tiny_qwen3"]

_NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16}
_DTYPES = (*_NUMPY_DTYPES, "bfloat16")  # bfloat16: numpy has none; stored as 16-bit words (safetensors "BF16")


@dataclass(frozen=True)
class Qwen3Config:
    """A Qwen3ForCausalLM config; field names are exactly those of HF `config.json`.

    Defaults are Qwen3-4B (Qwen3-4B-Thinking-2507 `config.json`). Sizes are counts; lengths are tokens.
    """

    vocab_size: int = 151936  # 151,643 BPE ranks + 26 added tokens, padded to a multiple of 128
    hidden_size: int = 2560
    intermediate_size: int = 9728  # SwiGLU FFN width
    num_hidden_layers: int = 36
    num_attention_heads: int = 32
    num_key_value_heads: int = 8  # grouped-query attention: 4 query heads per KV head
    head_dim: int = 128  # not hidden_size / heads in Qwen3 (32 * 128 = 4096 != 2560)
    max_position_embeddings: int = 262144
    rms_norm_eps: float = 1e-6
    rope_theta: float = 5_000_000.0
    tie_word_embeddings: bool = True  # lm_head shares model.embed_tokens.weight
    bos_token_id: int = 151643  # <|endoftext|>
    eos_token_id: int = 151645  # <|im_end|>

    @classmethod
    def tiny(cls) -> Qwen3Config:
        """Test size: hidden 256, 2 layers, 4 heads of 64, 2 KV heads, FFN 512; Qwen3-4B vocabulary and rope."""
        return cls(
            hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
        )

    def to_hf_dict(self, torch_dtype: str = "float32") -> dict[str, Any]:
        """The `config.json` content for this config, as transformers 4.51+ writes it for Qwen3."""
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "hidden_act": "silu",
            "initializer_range": 0.02,
            "max_window_layers": self.num_hidden_layers,
            "rope_scaling": None,
            "sliding_window": None,
            "use_cache": True,
            "use_sliding_window": False,
            "torch_dtype": torch_dtype,
            **dataclasses.asdict(self),
        }


def tiny_qwen3_tensor_shapes(config: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape (rows, cols) as PyTorch stores it, for every tensor of the checkpoint.

    `lm_head.weight` appears only when `tie_word_embeddings` is False.
    """
    hidden, head_dim = config.hidden_size, config.head_dim
    q_width, kv_width = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, hidden)}
    for layer in range(config.num_hidden_layers):
        prefix = f"model.layers.{layer}"
        shapes |= {
            f"{prefix}.input_layernorm.weight": (hidden,),
            f"{prefix}.self_attn.q_proj.weight": (q_width, hidden),
            f"{prefix}.self_attn.k_proj.weight": (kv_width, hidden),
            f"{prefix}.self_attn.v_proj.weight": (kv_width, hidden),
            f"{prefix}.self_attn.o_proj.weight": (hidden, q_width),
            f"{prefix}.self_attn.q_norm.weight": (head_dim,),
            f"{prefix}.self_attn.k_norm.weight": (head_dim,),
            f"{prefix}.post_attention_layernorm.weight": (hidden,),
            f"{prefix}.mlp.gate_proj.weight": (config.intermediate_size, hidden),
            f"{prefix}.mlp.up_proj.weight": (config.intermediate_size, hidden),
            f"{prefix}.mlp.down_proj.weight": (hidden, config.intermediate_size),
        }
    shapes["model.norm.weight"] = (hidden,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, hidden)
    return shapes


def _random_tensor(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Norm weights (1-D) ~ 1 + N(0, 0.1); matrices ~ N(0, 0.02), the HF initializer_range."""
    if len(shape) == 1:
        return 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
    return 0.02 * rng.standard_normal(shape, dtype=np.float32)


def _split_in_shards(names: list[str], shards: int) -> list[list[str]]:
    """Contiguous groups of names, one per shard, as evenly sized as the count allows."""
    if not 1 <= shards <= len(names):
        raise ValueError(f"shards is {shards}; expected 1..{len(names)} (the number of tensors)")
    return [list(group) for group in np.array_split(np.array(names, dtype=object), shards)]


def _save_safetensors(tensors: dict[str, np.ndarray], path: Path, *, bf16: bool) -> None:
    """One safetensors file; with `bf16`, the arrays are uint16 bfloat16 words and are written with dtype BF16.

    safetensors.numpy cannot write BF16, so that case writes the format itself (safetensors' README): an 8-byte
    little-endian header length, the JSON header (name -> dtype, shape, data_offsets; padded with spaces to a
    multiple of 8), then the tensors' bytes back to back in name order.
    """
    if not bf16:
        save_file(tensors, path, metadata={"format": "pt"})
        return
    header: dict[str, dict[str, Any]] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        end = offset + tensors[name].nbytes
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [offset, end]}
        offset += tensors[name].nbytes
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as file:
        file.write(len(header_bytes).to_bytes(8, "little"))
        file.write(header_bytes)
        for name in sorted(tensors):
            file.write(np.ascontiguousarray(tensors[name]).data)


def _write_weights(folder: Path, tensors: dict[str, np.ndarray], shards: int, *, bf16: bool = False) -> None:
    """model.safetensors, or model-0000i-of-0000N.safetensors + model.safetensors.index.json when shards > 1."""
    if shards == 1:
        _save_safetensors(tensors, folder / "model.safetensors", bf16=bf16)
        return
    weight_map: dict[str, str] = {}
    for shard_number, names in enumerate(_split_in_shards(list(tensors), shards), start=1):
        shard_name = f"model-{shard_number:05d}-of-{shards:05d}.safetensors"
        _save_safetensors({name: tensors[name] for name in names}, folder / shard_name, bf16=bf16)
        weight_map |= dict.fromkeys(names, shard_name)
    total_size_bytes = sum(array.nbytes for array in tensors.values())
    index = {"metadata": {"total_size": total_size_bytes}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def _cast(array: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> float32 / float16, or -> bfloat16 words (uint16, rounded to nearest even as torch does)."""
    if dtype == "bfloat16":
        return gguf.quants.quantize(array, gguf.GGMLQuantizationType.BF16).view(np.uint16)
    return array.astype(_NUMPY_DTYPES[dtype])


def write_tiny_qwen3(
    out_dir: str | Path,
    *,
    config: Qwen3Config | None = None,
    seed: int = 0,
    dtype: str = "float32",
    shards: int = 1,
    chat_template: str | None = None,
    tokenizer_dir: str | Path | None = None,
) -> Path:
    """Write a Qwen3ForCausalLM checkpoint with seeded random weights and the real Qwen3 tokenizer (or the
    tokenizer files of ``tokenizer_dir``, e.g. a small BPE from ``train_small_bpe``).

    Args:
        out_dir: folder to write into (created if missing): config.json, safetensors weights, tokenizer files.
        config: the model shape; `Qwen3Config.tiny()` when None.
        seed: seed of numpy's PCG64 generator; the same seed gives byte-identical weights.
        dtype: "float32", "float16" or "bfloat16" (weights are drawn in float32, then cast; bfloat16 rounds to
            nearest even, as torch does, and is stored as safetensors dtype BF16).
        shards: number of safetensors files; > 1 also writes model.safetensors.index.json.
        chat_template: stored in tokenizer_config.json when given (ignored with ``tokenizer_dir``).
        tokenizer_dir: copy ``tokenizer.json`` and ``tokenizer_config.json`` from here; ``config.vocab_size`` must
            hold its vocabulary.
    Returns:
        `out_dir` as a Path.
    Raises:
        ValueError: unknown dtype, shards outside 1..number of tensors, or a vocabulary larger than the config's.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype is {dtype!r}; expected one of {sorted(_DTYPES)}")
    config = config or Qwen3Config.tiny()
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors = {
        name: _cast(_random_tensor(rng, shape), dtype) for name, shape in tiny_qwen3_tensor_shapes(config).items()
    }
    _write_weights(folder, tensors, shards, bf16=dtype == "bfloat16")
    config_text = json.dumps(config.to_hf_dict(torch_dtype=dtype), indent=2)
    (folder / "config.json").write_text(config_text + "\n", encoding="utf-8")
    if tokenizer_dir is None:
        build_qwen3_tokenizer_files(folder, chat_template=chat_template)
        return folder
    vocabulary = json.loads((Path(tokenizer_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    size = len(vocabulary["model"]["vocab"]) + len(vocabulary.get("added_tokens", []))
    if size > config.vocab_size:
        raise ValueError(f"the tokenizer has {size} tokens; config.vocab_size is {config.vocab_size}")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(Path(tokenizer_dir) / name, folder / name)
    return folder


def build_tiny_qwen3_gguf(
    workdir: str | Path,
    out_type: str = "f32",
    *,
    config: Qwen3Config | None = None,
    seed: int = 0,
    chat_template: str | None = None,
) -> Path:
    """Write a tiny Qwen3 checkpoint under `workdir/checkpoint` and convert it to `workdir/tiny-qwen3-<type>.gguf`.

    The checkpoint is reused when it already exists, so one folder serves several output types.
    Returns:
        the GGUF path.
    """
    workdir = Path(workdir)
    checkpoint = workdir / "checkpoint"
    if not (checkpoint / "config.json").is_file():
        write_tiny_qwen3(checkpoint, config=config, seed=seed, chat_template=chat_template)
    return convert_checkpoint(checkpoint, workdir / f"tiny-qwen3-{out_type}.gguf", out_type=out_type)
