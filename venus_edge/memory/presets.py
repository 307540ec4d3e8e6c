"""Presets: what the memory planner chooses for DR-Venus-4B at common quant types and RAM budgets (the README's
table, generated here so that it changes with the planner; ``tests/test_plan.py`` checks the README holds it), and
the models known by their dimensions without a file (DR-Venus-4B and the small models the phone tables and the
planner's refusals name, ``PRESET_MODELS``).

    python -c "from venus_edge.memory import presets_table; print(presets_table())"
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from venus_edge.errors import MemoryPlanError
from venus_edge.memory.header import ModelHeader
from venus_edge.memory.plan import QUANT_BITS_PER_WEIGHT, format_bytes, header_from_dims, plan_memory

__all__ = ["PRESET_MODELS", "PRESET_QUANTS", "dr_venus_4b_header", "header_at_quant", "preset_model_header",
           "presets_table"]

#: Bits per weight of each quant type in the presets: F16 exactly, the others approximate (llama.cpp
#: tools/quantize); 4.02 B parameters give files of about 2.5, 3.3, 4.3 and 8.0 GB.
PRESET_QUANTS: dict[str, float] = {"Q4_K_M": 4.89, "Q6_K": 6.56, "Q8_0": 8.5, "F16": 16.0}


def dr_venus_4b_header(file_type: str = "Q4_K_M", bits_per_weight: float | None = None) -> ModelHeader:
    """DR-Venus-4B as a ``ModelHeader`` without a file: Qwen3-4B-Thinking-2507's dimensions (``config.json``;
    PROTOCOL.md: 36 layers, 32 query and 8 KV heads of 128, hidden 2560, feed-forward 9728, vocabulary 151,936,
    262,144 training tokens) and 4.02 B parameters at ``bits_per_weight`` (default ``PRESET_QUANTS[file_type]``).

    Raises:
        KeyError: a file type outside ``PRESET_QUANTS`` without ``bits_per_weight``.
    """
    bits = PRESET_QUANTS[file_type] if bits_per_weight is None else bits_per_weight
    return header_from_dims(n_params=4_022_468_096, bits_per_weight=bits, n_layer=36, n_head=32, n_head_kv=8,
                            n_embd=2560, head_dim=128, n_ff=9728, n_vocab=151_936, n_ctx_train=262_144,
                            file_type=file_type, name="DR-Venus-4B")


def presets_table(budgets_gib: tuple[int, ...] = (4, 6, 8, 16), helper_n_ctx: int = 8_192) -> str:
    """The README's table: for DR-Venus-4B at each quant of ``PRESET_QUANTS`` and each RAM budget in GiB, the
    plan ``venus-edge research --ram NG`` loads with (n_ctx and KV-cache type), or "does not fit"."""
    header = ["| quant (weights) | " + " | ".join(f"--ram {gib}G" for gib in budgets_gib) + " |",
              "|---|" + "---|" * len(budgets_gib)]
    rows = []
    for quant in PRESET_QUANTS:
        model = dr_venus_4b_header(quant)
        cells = []
        for gib in budgets_gib:
            try:
                plan = plan_memory(model, ram_bytes=gib << 30, n_threads=1, helper_n_ctx=helper_n_ctx,
                                   cpu_features=frozenset())
            except MemoryPlanError:
                cells.append("does not fit")
                continue
            fa = ", FA" if plan.flash_attn else ""
            cells.append(f"{plan.n_ctx // 1024}K {plan.kv_type}{fa} ({format_bytes(plan.total_bytes)})")
        rows.append(f"| {quant} ({format_bytes(model.weight_bytes)}) | " + " | ".join(cells) + " |")
    return "\n".join(header + rows)


def _qwen3_1_7b(bits: float, file_type: str) -> ModelHeader:
    """Qwen3-1.7B (huggingface.co/Qwen/Qwen3-1.7B, config.json: 28 layers, 16 query and 8 KV heads of 128, hidden
    2048, feed-forward 6144, vocabulary 151,936, 40,960 positions; tied embeddings): 1.72 B parameters (1.41 B in
    the layers, as its model card says, and the 311 M of the embedding)."""
    return header_from_dims(n_params=1_720_574_976, bits_per_weight=bits, n_layer=28, n_head=16, n_head_kv=8,
                            n_embd=2048, head_dim=128, n_ff=6144, n_vocab=151_936, n_ctx_train=40_960,
                            file_type=file_type, name="Qwen3-1.7B")


def _qwen3_0_6b(bits: float, file_type: str) -> ModelHeader:
    """Qwen3-0.6B (huggingface.co/Qwen/Qwen3-0.6B, config.json: 28 layers, 16 query and 8 KV heads of 128, hidden
    1024, feed-forward 3072, vocabulary 151,936, 40,960 positions; tied embeddings): 0.60 B parameters (0.44 B in
    the layers, as its model card says, and the 156 M of the embedding)."""
    return header_from_dims(n_params=596_049_920, bits_per_weight=bits, n_layer=28, n_head=16, n_head_kv=8,
                            n_embd=1024, head_dim=128, n_ff=3072, n_vocab=151_936, n_ctx_train=40_960,
                            file_type=file_type, name="Qwen3-0.6B")


def _smollm2_135m(bits: float, file_type: str) -> ModelHeader:
    """SmolLM2-135M-Instruct (the test model; its GGUF header: 30 layers, 9 query and 3 KV heads of 64, hidden 576,
    feed-forward 1536, vocabulary 49,152, 8,192 positions; ``tests/test_devices.py`` checks these against the file):
    134.5 M parameters."""
    return header_from_dims(n_params=134_515_008, bits_per_weight=bits, n_layer=30, n_head=9, n_head_kv=3,
                            n_embd=576, head_dim=64, n_ff=1536, n_vocab=49_152, n_ctx_train=8_192,
                            file_type=file_type, architecture="llama", name="SmolLM2-135M")


#: Models known by their dimensions, largest first: name -> a function of (bits per weight, file type) giving the
#: ``ModelHeader`` of that quant (``preset_model_header``). DR-Venus-4B is the agent; the Qwen3 models share its
#: architecture and vocabulary at a phone's size (not trained for the research protocol); SmolLM2-135M is the test
#: model.
PRESET_MODELS: dict[str, Callable[[float, str], ModelHeader]] = {
    "DR-Venus-4B": lambda bits, file_type: dr_venus_4b_header(file_type, bits),
    "Qwen3-1.7B": _qwen3_1_7b,
    "Qwen3-0.6B": _qwen3_0_6b,
    "SmolLM2-135M": _smollm2_135m,
}


def preset_model_header(name: str, quant: str) -> ModelHeader:
    """The ``ModelHeader`` of a model of ``PRESET_MODELS`` at ``quant`` (a type of ``QUANT_BITS_PER_WEIGHT``, or
    F16).

    Raises:
        KeyError: an unknown model or quant type; the message lists the known ones.
    """
    bits = {**QUANT_BITS_PER_WEIGHT, "F16": 16.0}
    if name not in PRESET_MODELS or quant not in bits:
        raise KeyError(f"no preset {name!r} at {quant!r}: the models are {', '.join(PRESET_MODELS)}; the types "
                       f"{', '.join(bits)}")
    return PRESET_MODELS[name](bits[quant], quant)


def header_at_quant(header: ModelHeader, quant: str) -> ModelHeader | None:
    """``header``'s model quantized to ``quant`` (weights of ``n_params`` at the type's bits per weight,
    ``QUANT_BITS_PER_WEIGHT``), or None when the header does not say how many parameters the model has."""
    if not header.n_params:
        return None
    bits = QUANT_BITS_PER_WEIGHT[quant]
    name = header.metadata.get("general.name") or (header.path.stem if header.path else None)
    return dataclasses.replace(header, weight_bytes=int(header.n_params * bits / 8), file_type=quant, path=None,
                               metadata={**header.metadata, "general.name": name} if name else header.metadata)
