"""Presets: what the memory planner chooses for DR-Venus-4B at common quant types and RAM budgets (the README's
table, generated here so that it changes with the planner; ``tests/test_plan.py`` checks the README holds it).

    python -c "from venus_edge.memory import presets_table; print(presets_table())"
"""

from __future__ import annotations

from venus_edge.errors import MemoryPlanError
from venus_edge.memory.header import ModelHeader
from venus_edge.memory.plan import format_bytes, header_from_dims, plan_memory

__all__ = ["PRESET_QUANTS", "dr_venus_4b_header", "presets_table"]

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
