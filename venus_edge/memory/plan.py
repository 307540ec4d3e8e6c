"""The memory planner: how large a context window and which KV-cache type fit a model in a RAM budget.

From a model's header (``read_model_header``) and the RAM available or given, ``plan_memory`` chooses n_ctx,
the KV-cache type (f16, q8_0, q4_0), flash attention, the batch sizes and the threads, and returns a
``MemoryPlan`` that itemizes resident memory: weights, KV cache, compute buffers, process overhead, and the
helper context that ``visit`` uses. ``estimate_memory`` prices one given set of settings.

Usage::

    header = read_model_header("DR-Venus-4B-RL-Q4_K_M.gguf")
    plan = plan_memory(header, ram_bytes=parse_size("6G"), helper_n_ctx=8192)
    print(plan.render())          # n_ctx 26,624 with a q8_0 KV cache, and the table of bytes
    LlamaCppEngine(path, n_ctx=plan.n_ctx, kv_type=plan.kv_type, flash_attn=plan.flash_attn)

Where the bytes come from (llama.cpp as vendored by llama-cpp-python 0.3.36, CPU backend):

- weights: the tensor data of the file, mapped. Tensors that the CPU backend repacks into its own layout
  (ggml-cpu/repack.cpp: Q4_0, Q4_K, IQ4_NL with AVX2) are copied into anonymous memory of the same size; their
  mapped source pages stay resident while memory is free (peak RSS counts them) but are clean file pages the
  kernel drops first, so the fit counts them once and ``resident_bytes`` twice.
- KV cache: ``n_layer * kv_size * (row_bytes(type_k, n_embd_k_gqa) + row_bytes(type_v, n_embd_v_gqa))``
  (llama-kv-cache.cpp), with ``kv_size`` = n_ctx rounded up to a multiple of 256 (llama-context.cpp:
  ``cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256)``). llama.cpp clears it at creation, so all of it is resident.
- compute: the largest of three phases of the worst-case graph (``sched_reserve`` in llama-context.cpp;
  attention in ``build_attn_mha``, llama-graph.cpp), with ``U`` = n_ubatch and ``C`` = kv_size:
  attention ``C*U*4`` mask (2 bytes with flash attention) + ``n_head*C*U*4`` KQ scores (none with flash
  attention) + ``6*max(n_embd, n_head*head_dim_k)*U*4``; feed-forward ``2*n_ff*U*4 + 3*n_embd*U*4``; output
  ``n_vocab*n_outputs*4 + 3*n_embd*U*4``. llama.cpp reserves the output phase for ``n_outputs = U`` (the
  "compute buffer size" it prints), but the engine asks for the last token's logits only, so one row of it is
  ever touched: the plan counts the touched size. The reserved size is calibrated against the printed sizes
  for SmolLM2-135M and Qwen2.5-0.5B at n_ctx 1K-16K, n_ubatch 128/512, with and without flash attention:
  within 1.5 % (tests/test_plan.py holds it to 2 %). Without flash attention the CPU backend's work buffer
  also holds the KQ scores in f16 (``n_head*C*U*2``), converted for the V product (``ggml_compute_forward_mul_mat``
  in ggml-cpu.c); the rest of the work buffer (activations quantized for the weights, a few MiB) is left out.
- overhead: Python, numpy, llama-cpp-python and llama.cpp loaded (about 80 MiB), a few MiB of context state,
  and llama.cpp's vocabulary tables (about 290 bytes per entry): measured with the engine on SmolLM2-135M and
  Qwen2.5-0.5B. ``benchmarks/plan_vs_rss.py`` compares whole estimates with peak RSS.

The choice rule (``plan_memory``). Windows are tried from ``cap = min(n_ctx_train, max_n_ctx)`` down in steps of
1,024 to ``MIN_N_CTX`` (or only ``n_ctx`` when it is given); a plan fits when its total is within the budget less
``HEADROOM_FRACTION``. For each KV type, its largest fitting window (f16 tries flash attention off, then on: the
same numbers with a smaller compute buffer; q8_0 and q4_0 need flash attention for their V cache). Then:
1. f16 if it reaches ``cap`` (so a machine with room loads exactly as before the planner existed);
2. else q8_0 if it reaches ``min(cap, Q4_0_BELOW_N_CTX)``: q8_0 keys and values are close to lossless, and
   DR-Venus sessions run to tens of thousands of tokens, so a longer window beats a finer cache;
3. else the type with the longest window (q4_0 when it is longer, q8_0 on a tie).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from venus_edge.errors import MemoryPlanError
from venus_edge.memory.header import ModelHeader
from venus_edge.memory.machine import available_ram_bytes, llama_cpu_features, physical_cores, total_ram_bytes

__all__ = [
    "DEFAULT_MAX_N_CTX",
    "HEADROOM_FRACTION",
    "KV_TYPES",
    "MIN_N_CTX",
    "QUANT_BITS_PER_WEIGHT",
    "MemoryPlan",
    "engine_plan",
    "estimate_memory",
    "format_bytes",
    "header_from_dims",
    "kv_bytes_per_token",
    "parse_size",
    "plan_memory",
    "refuse_beyond_machine",
]

KVType = Literal["f32", "f16", "q8_0", "q4_0"]
#: The KV-cache types the planner chooses from, least quality loss first (f32 is accepted, never chosen).
KV_TYPES: tuple[KVType, ...] = ("f16", "q8_0", "q4_0")
#: ggml_type ids for llama.cpp's ``type_k`` / ``type_v`` (ggml/include/ggml.h).
GGML_KV_TYPE_IDS: dict[str, int] = {"f32": 0, "f16": 1, "q8_0": 8, "q4_0": 2}
# (elements per block, bytes per block) of each KV type (GGML_QUANT_SIZES in gguf-py/gguf/constants.py).
_KV_BLOCKS: dict[str, tuple[int, int]] = {"f32": (1, 4), "f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}

#: The largest n_ctx chosen when none is asked for (the runtime's cap before the planner existed).
DEFAULT_MAX_N_CTX = 32_768
#: The smallest n_ctx the planner chooses by itself: below it a research session holds about one page.
MIN_N_CTX = 2_048
#: Step between the n_ctx values tried, in tokens.
N_CTX_STEP = 1_024
#: llama.cpp rounds the KV cache up to a multiple of this many cells (llama-context.cpp).
N_CTX_PAD = 256
#: A q4_0 KV cache is chosen only when q8_0 leaves a window shorter than this (q4_0 keys cost visible quality).
Q4_0_BELOW_N_CTX = 16_384
_KV_LOSS_ORDER = ("f32", "f16", "q8_0", "q4_0")
#: Share of the RAM budget left free: the estimate's error (within 15 % of measured peak RSS), the page cache,
#: and what the rest of the system allocates while a session runs.
HEADROOM_FRACTION = 0.15
DEFAULT_N_BATCH = 512
DEFAULT_N_UBATCH = 512

_MiB = 1 << 20
# Python + numpy + llama-cpp-python + venus_edge imported (~80 MiB resident, measured with the engine loaded on
# SmolLM2-135M and Qwen2.5-0.5B), plus llama.cpp's per-context state.
_BASE_OVERHEAD_BYTES = 86 * _MiB
# llama.cpp's vocabulary tables per entry (measured: 20 MiB for 49,152 entries, 48 MiB for 151,936).
_OVERHEAD_BYTES_PER_VOCAB_ENTRY = 290

#: Bits per weight of common quant types, finest first, to name what would fit: Q8_0 and Q4_0 exactly (blocks of 32
#: weights in 34 and 18 bytes, ggml-common.h), the K-quants approximate (llama.cpp tools/quantize). Q4_0 and Q8_0
#: are the types an ARM build repacks for its dot-product and i8mm kernels (ggml-cpu/repack.cpp).
QUANT_BITS_PER_WEIGHT: dict[str, float] = {"Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.69, "Q4_K_M": 4.89, "Q4_0": 4.5,
                                           "Q3_K_M": 3.91, "Q2_K": 3.0}

# ggml-cpu/repack.cpp (ggml_repack_get_optimal_repack_type): (ggml type, CPU feature, rows multiple of).
_REPACK_RULES: tuple[tuple[int, str, int], ...] = (
    (2, "AVX2", 8), (12, "AVX2", 8), (20, "AVX2", 8), (39, "AVX2", 8), (10, "AVX512", 8),
    (2, "MATMUL_INT8", 4), (12, "MATMUL_INT8", 8), (13, "MATMUL_INT8", 8), (14, "MATMUL_INT8", 8),
    (8, "MATMUL_INT8", 4), (2, "DOTPROD", 4), (12, "DOTPROD", 8), (13, "DOTPROD", 8), (14, "DOTPROD", 8),
    (20, "DOTPROD", 4), (39, "DOTPROD", 4), (8, "DOTPROD", 4),
)


@dataclass(frozen=True)
class MemoryPlan:
    """Settings for one llama.cpp context and the resident memory they cost. Sizes in bytes, lengths in tokens.

    Attributes:
        n_ctx: the context window.
        kv_type: the K and V cache type (``f16``, ``q8_0``, ``q4_0``; ``f32`` for parity checks).
        flash_attn: flash attention on (required by a quantized V cache; a smaller compute buffer).
        n_batch: prompt tokens per llama_decode call.
        n_ubatch: prompt tokens per graph evaluation (sets the compute buffers).
        n_threads: decode threads.
        helper_n_ctx: the window of the engine's second context (``visit`` extraction); 0 for none.
        weights_bytes: tensor data of the model file.
        repacked_bytes: the part of the weights the CPU backend copies into its own layout (see module doc).
        kv_bytes: the KV cache of the main context.
        compute_bytes: the touched part of the main context's compute buffers (graph and CPU work buffer).
        helper_bytes: KV cache and compute buffer of the helper context.
        overhead_bytes: the process without the model (Python, libraries, vocabulary tables).
        compute_reserved_bytes: the compute buffer llama.cpp reserves (its "compute buffer size" line), of which
            ``compute_bytes`` is touched.
        ram_bytes: the RAM budget the plan was made for, or None for an estimate without one.
        usable_bytes: the part of the budget a plan may fill (less ``HEADROOM_FRACTION``), or None.
        model: name, path, file type and n_ctx_train of the model, for people.
    """

    n_ctx: int
    kv_type: KVType
    flash_attn: bool
    n_batch: int
    n_ubatch: int
    n_threads: int
    helper_n_ctx: int
    weights_bytes: int
    repacked_bytes: int
    kv_bytes: int
    compute_bytes: int
    helper_bytes: int
    overhead_bytes: int
    compute_reserved_bytes: int
    ram_bytes: int | None = None
    usable_bytes: int | None = None
    model: dict[str, Any] | None = None

    @property
    def total_bytes(self) -> int:
        """What must fit in RAM: weights, KV caches, compute buffers and overhead."""
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.helper_bytes + self.overhead_bytes

    @property
    def resident_bytes(self) -> int:
        """Expected peak RSS on a machine with free memory: ``total_bytes`` plus the repacked tensors' mapped
        source pages, which stay resident until the kernel needs the memory."""
        return self.total_bytes + self.repacked_bytes

    @property
    def fits(self) -> bool:
        """``total_bytes`` is within ``usable_bytes`` (True when there is no budget)."""
        return self.usable_bytes is None or self.total_bytes <= self.usable_bytes

    @property
    def type_k(self) -> int:
        """llama.cpp's ``type_k`` (a ggml_type id)."""
        return GGML_KV_TYPE_IDS[self.kv_type]

    @property
    def type_v(self) -> int:
        """llama.cpp's ``type_v`` (a ggml_type id)."""
        return GGML_KV_TYPE_IDS[self.kv_type]

    def to_dict(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict, with the derived totals."""
        return {**asdict(self), "total_bytes": self.total_bytes, "resident_bytes": self.resident_bytes,
                "fits": self.fits}

    def render(self) -> str:
        """The plan as a short table for people (sizes in GiB or MiB)."""
        model = self.model or {}
        name = model.get("name") or model.get("path") or "model"
        fa = ", flash attention" if self.flash_attn else ""
        rows = [
            ("weights", self.weights_bytes, f"{model.get('file_type') or '?'}, mapped from the file"),
            ("KV cache", self.kv_bytes, f"{self.n_ctx:,} tokens x {_kib(self.kv_bytes / _kv_cells(self.n_ctx))}"),
            ("compute buffers", self.compute_bytes, f"n_ubatch {self.n_ubatch} (llama.cpp reserves "
                                                    f"{format_bytes(self.compute_reserved_bytes)})"),
        ]
        if self.helper_n_ctx:
            rows.append(("helper context", self.helper_bytes, f"{self.helper_n_ctx:,} tokens, for visit"))
        rows.append(("overhead", self.overhead_bytes, "Python, llama.cpp, vocabulary"))
        lines = [f"{name}: n_ctx {self.n_ctx:,}, KV cache {self.kv_type}{fa}, n_batch {self.n_batch}, "
                 f"{self.n_threads} threads"]
        lines += [f"  {label:<16} {format_bytes(size):>10}  {note}" for label, size, note in rows]
        lines.append(f"  {'total':<16} {format_bytes(self.total_bytes):>10}")
        if self.repacked_bytes:
            lines.append(f"  {'peak RSS':<16} {format_bytes(self.resident_bytes):>10}  while memory is free: "
                         f"{format_bytes(self.repacked_bytes)} of repacked weights also stay mapped")
        if self.ram_bytes is not None and self.usable_bytes is not None:
            lines.append(f"  {'budget':<16} {format_bytes(self.ram_bytes):>10}  {format_bytes(self.usable_bytes)} "
                         f"usable after {HEADROOM_FRACTION:.0%} headroom")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- sizes


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
               "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_size(text: str) -> int:
    """Bytes in a size such as ``6G``, ``512M``, ``6GiB`` or ``6.5GB``.

    ``K``/``M``/``G``/``T`` and ``KiB``/``MiB``/``GiB``/``TiB`` are powers of 1,024; ``KB``/``MB``/``GB``/``TB``
    are powers of 1,000; a bare number is bytes. Case and a space before the unit do not matter.

    Raises:
        ValueError: not a positive size, or an unknown unit (the message lists the units).
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise ValueError(f"cannot read {text!r} as a size; write e.g. 6G, 512M, 6GiB or 6.5GB "
                         f"(K/M/G/T and KiB/MiB/GiB/TiB are binary, KB/MB/GB/TB decimal)")
    size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if size <= 0:
        raise ValueError(f"a size must be positive, got {text!r}")
    return size


def format_bytes(n_bytes: float) -> str:
    """``3.1 GiB`` or ``512.0 MiB`` (binary units)."""
    return f"{n_bytes / (1 << 30):.1f} GiB" if abs(n_bytes) >= 1 << 30 else f"{n_bytes / _MiB:.1f} MiB"


def _kib(n_bytes: float) -> str:
    return f"{n_bytes / 1024:.1f} KiB"


# ---------------------------------------------------------------------------------------------- formulas


def _row_bytes(kv_type: str, n_elements: int) -> int:
    block, block_bytes = _KV_BLOCKS[kv_type]
    return -(-n_elements // block) * block_bytes


def _kv_cells(n_ctx: int) -> int:
    """The KV cache's cells: n_ctx rounded up to ``N_CTX_PAD`` (llama-context.cpp)."""
    return -(-n_ctx // N_CTX_PAD) * N_CTX_PAD


def kv_bytes_per_token(header: ModelHeader, kv_type: str) -> int:
    """KV-cache bytes per token: ``n_layer * (row_bytes(K) + row_bytes(V))`` where a K row holds
    ``n_head_kv * head_dim_k`` elements and a V row ``n_head_kv * head_dim_v`` (f16 2 bytes, q8_0 34/32,
    q4_0 18/32 per element). DR-Venus-4B (36 layers, 8 KV heads, head dim 128) in f16: 147,456 (144 KiB).

    Raises:
        ValueError: an unknown KV type.
    """
    if kv_type not in _KV_BLOCKS:
        raise ValueError(f"unknown KV-cache type {kv_type!r}; expected one of {', '.join(_KV_BLOCKS)}")
    return header.n_layer * (_row_bytes(kv_type, header.n_embd_k_gqa) + _row_bytes(kv_type, header.n_embd_v_gqa))


def _compute_bytes(header: ModelHeader, n_cells: int, n_ubatch: int, flash_attn: bool, n_outputs: int) -> int:
    """The compute buffer of one context (module docstring, "compute"), for ``n_outputs`` logits rows."""
    u, c, f32 = n_ubatch, n_cells, 4
    width = max(header.n_embd, header.n_head * header.head_dim_k)
    attention = c * u * (2 if flash_attn else 4) + (0 if flash_attn else header.n_head * c * u * f32)
    attention += 6 * width * u * f32
    feed_forward = 2 * header.n_ff * u * f32 + 3 * header.n_embd * u * f32
    output = header.n_vocab * n_outputs * f32 + 3 * header.n_embd * u * f32
    return max(attention, feed_forward, output)


def _touched_compute_bytes(header: ModelHeader, n_cells: int, n_ubatch: int, flash_attn: bool) -> int:
    """What the engine touches of the compute buffers: the graph for one logits row, plus, without flash attention,
    the CPU backend's work buffer that holds the KQ scores converted to f16 for the V product
    (``ggml_compute_forward_mul_mat`` in ggml-cpu.c converts src1 to the f16 weights' vec_dot_type)."""
    work = 0 if flash_attn else header.n_head * n_cells * n_ubatch * 2
    return _compute_bytes(header, n_cells, n_ubatch, flash_attn, 1) + work


def _repacked_bytes(header: ModelHeader, cpu_features: frozenset[str]) -> int:
    """Bytes of the matmul weights that ggml-cpu/repack.cpp copies into its interleaved layout on this CPU."""
    if "REPACK" not in cpu_features:
        return 0
    total = 0
    for tensor in header.tensors:
        if len(tensor.shape) != 2 or tensor.name.startswith("token_embd") or tensor.n_bytes < 0:
            continue  # only 2-D matmul weights; the embedding table is read with get_rows
        rows = tensor.shape[1]
        if any(kind == tensor.ggml_type and feature in cpu_features and rows % multiple == 0
               for kind, feature, multiple in _REPACK_RULES):
            total += tensor.n_bytes
    return total


def estimate_memory(
    header: ModelHeader,
    *,
    n_ctx: int,
    kv_type: KVType = "f16",
    flash_attn: bool = False,
    n_batch: int = DEFAULT_N_BATCH,
    n_ubatch: int = DEFAULT_N_UBATCH,
    n_threads: int | None = None,
    helper_n_ctx: int = 0,
    ram_bytes: int | None = None,
    headroom: float = HEADROOM_FRACTION,
    cpu_features: frozenset[str] | None = None,
) -> MemoryPlan:
    """The resident memory of one set of settings (no choice, no refusal: see ``MemoryPlan.fits``).

    Args:
        header: the model's dimensions.
        n_ctx: context window in tokens.
        kv_type: K and V cache type.
        flash_attn: flash attention on.
        n_batch: prompt tokens per decode call; n_ubatch is capped by it (as llama-cpp-python does).
        n_ubatch: prompt tokens per graph evaluation.
        n_threads: decode threads (default the physical cores).
        helper_n_ctx: window of the engine's helper context (``visit``), 0 for none.
        ram_bytes: the RAM budget, for ``fits`` and the table.
        headroom: share of the budget left free.
        cpu_features: llama.cpp's CPU features (default: this machine's, ``llama_cpu_features``); an empty
            set plans for a CPU without repacking.

    Raises:
        ValueError: an unknown KV type, a quantized V cache without flash attention, or n_ctx < 1.
    """
    if kv_type not in _KV_BLOCKS:
        raise ValueError(f"unknown KV-cache type {kv_type!r}; expected one of {', '.join(_KV_BLOCKS)}")
    if kv_type not in ("f16", "f32") and not flash_attn:
        raise ValueError(f"a {kv_type} V cache needs flash attention (llama.cpp refuses it otherwise); "
                         "pass flash_attn=True")
    if n_ctx < 1:
        raise ValueError(f"n_ctx must be at least 1, got {n_ctx}")
    features = llama_cpu_features() if cpu_features is None else cpu_features
    n_batch = min(n_batch, n_ctx)
    n_ubatch = min(n_ubatch, n_batch)
    per_token = kv_bytes_per_token(header, kv_type)
    helper_bytes = 0
    if helper_n_ctx:
        helper_cells = _kv_cells(helper_n_ctx)
        helper_bytes = per_token * helper_cells + _touched_compute_bytes(
            header, helper_cells, min(n_ubatch, helper_n_ctx), flash_attn)
    cells = _kv_cells(n_ctx)
    return MemoryPlan(
        n_ctx=n_ctx, kv_type=kv_type, flash_attn=flash_attn, n_batch=n_batch, n_ubatch=n_ubatch,
        n_threads=n_threads or physical_cores(), helper_n_ctx=helper_n_ctx,
        weights_bytes=header.weight_bytes,
        repacked_bytes=_repacked_bytes(header, features),
        kv_bytes=per_token * cells,
        compute_bytes=_touched_compute_bytes(header, cells, n_ubatch, flash_attn),
        helper_bytes=helper_bytes,
        overhead_bytes=_BASE_OVERHEAD_BYTES + _OVERHEAD_BYTES_PER_VOCAB_ENTRY * header.n_vocab,
        compute_reserved_bytes=_compute_bytes(header, cells, n_ubatch, flash_attn, n_ubatch),
        ram_bytes=ram_bytes,
        usable_bytes=None if ram_bytes is None else int(ram_bytes * (1 - headroom)),
        model={"name": header.metadata.get("general.name") or (header.path.name if header.path else None),
               "path": None if header.path is None else str(header.path), "file_type": header.file_type,
               "architecture": header.architecture, "n_ctx_train": header.n_ctx_train},
    )


# ---------------------------------------------------------------------------------------------- the choice


def _options(kv_type: KVType | None, flash_attn: bool | None) -> list[tuple[KVType, bool]]:
    """(KV type, flash attention) pairs to try at one n_ctx, least quality loss first."""
    options: list[tuple[KVType, bool]] = [("f16", False), ("f16", True), ("q8_0", True), ("q4_0", True)]
    if kv_type == "f32":
        options = [("f32", False), ("f32", True)]
    elif kv_type is not None:
        options = [option for option in options if option[0] == kv_type]
    return [option for option in options if flash_attn is None or option[1] == flash_attn]


def _choose(best: dict[str, MemoryPlan], cap: int) -> MemoryPlan | None:
    """The choice rule over each KV type's largest fitting plan: f16 if it reaches ``cap``; else q8_0 if it
    reaches ``min(cap, Q4_0_BELOW_N_CTX)``; else the largest window, the less lossy type on a tie."""
    if "f16" in best and best["f16"].n_ctx >= cap:
        return best["f16"]
    if "q8_0" in best and best["q8_0"].n_ctx >= min(cap, Q4_0_BELOW_N_CTX):
        return best["q8_0"]
    ranked = sorted(best.values(), key=lambda plan: (-plan.n_ctx, _KV_LOSS_ORDER.index(plan.kv_type)))
    return ranked[0] if ranked else None


def _n_ctx_candidates(header: ModelHeader, max_n_ctx: int) -> list[int]:
    """n_ctx values to try, largest first: the cap, then multiples of ``N_CTX_STEP`` down to ``MIN_N_CTX``."""
    cap = min(header.n_ctx_train or max_n_ctx, max_n_ctx)
    below = range(cap // N_CTX_STEP * N_CTX_STEP, MIN_N_CTX - 1, -N_CTX_STEP)
    return [cap] + [n for n in below if n < cap]


def plan_memory(
    header: ModelHeader,
    *,
    ram_bytes: int,
    n_ctx: int | None = None,
    kv_type: KVType | None = None,
    flash_attn: bool | None = None,
    n_threads: int | None = None,
    n_batch: int = DEFAULT_N_BATCH,
    helper_n_ctx: int = 0,
    max_n_ctx: int = DEFAULT_MAX_N_CTX,
    headroom: float = HEADROOM_FRACTION,
    cpu_features: frozenset[str] | None = None,
) -> MemoryPlan:
    """Choose n_ctx, KV-cache type and flash attention that fit ``header``'s model in ``ram_bytes``.

    The choice rule is in the module docstring. ``n_ctx``, ``kv_type`` and ``flash_attn`` fix what they name;
    the rest is chosen.

    Args:
        header: the model's dimensions (``read_model_header``).
        ram_bytes: the RAM budget (``available_ram_bytes()``, or ``parse_size("6G")``).
        n_ctx: a fixed window, or None to choose one.
        kv_type: a fixed KV-cache type (``f16``, ``q8_0``, ``q4_0``; ``f32``), or None to choose.
        flash_attn: fixed flash attention, or None to choose (a quantized V cache always has it).
        n_threads: decode threads (default the physical cores).
        n_batch: prompt tokens per decode call.
        helper_n_ctx: window of the engine's helper context (``visit``), 0 for none; counted in the fit.
        max_n_ctx: the largest window chosen when ``n_ctx`` is None.
        headroom: share of ``ram_bytes`` left free.
        cpu_features: llama.cpp's CPU features (see ``estimate_memory``).

    Raises:
        MemoryPlanError: nothing fits; the message names the sizes and what would fit (a smaller quant, a
            larger budget, or the largest n_ctx that fits when ``n_ctx`` was fixed).
        ValueError: a quantized KV type with ``flash_attn=False``, or an unknown KV type.
    """
    if kv_type is not None and kv_type not in ("f16", "f32") and flash_attn is False:
        raise ValueError(f"a {kv_type} V cache needs flash attention (llama.cpp refuses it otherwise); "
                         "drop flash_attn=False or use kv_type='f16'")
    features = llama_cpu_features() if cpu_features is None else cpu_features
    threads = n_threads or physical_cores()
    candidates = [n_ctx] if n_ctx is not None else _n_ctx_candidates(header, max_n_ctx)
    tried: list[MemoryPlan] = []
    best: dict[str, MemoryPlan] = {}  # KV type -> its largest window that fits (least lossy option there)
    for kind, fa in _options(kv_type, flash_attn):
        for window in candidates:
            if kind in best and best[kind].n_ctx >= window:
                break
            plan = estimate_memory(header, n_ctx=window, kv_type=kind, flash_attn=fa, n_batch=n_batch,
                                   n_threads=threads, helper_n_ctx=helper_n_ctx, ram_bytes=ram_bytes,
                                   headroom=headroom, cpu_features=features)
            if plan.fits:
                best[kind] = plan
                break
            tried.append(plan)
    chosen = _choose(best, candidates[0])
    if chosen is not None:
        return chosen
    smallest = min(tried, key=lambda p: p.total_bytes)
    raise MemoryPlanError(_refusal(header, smallest, n_ctx, kv_type, flash_attn, max_n_ctx),
                          needed_bytes=smallest.total_bytes, usable_bytes=smallest.usable_bytes or 0)


def engine_plan(
    header: ModelHeader,
    *,
    n_ctx: int | None = None,
    kv_type: KVType | None = None,
    flash_attn: bool | None = None,
    ram_bytes: int | None = None,
    n_threads: int | None = None,
    n_batch: int = DEFAULT_N_BATCH,
    helper_n_ctx: int = 0,
) -> MemoryPlan:
    """The plan an engine loads with (``LlamaCppEngine``).

    Without ``n_ctx``, or with a RAM budget, ``plan_memory`` against ``ram_bytes`` (default
    ``available_ram_bytes()``). With ``n_ctx`` and no budget, the settings asked for are priced
    (``estimate_memory``) but never refused, as before the planner existed: f16 unless ``kv_type`` says
    otherwise, flash attention only when asked for or when the V cache is quantized.

    Raises:
        MemoryPlanError: a planned load that does not fit (see ``plan_memory``).
        ValueError: a quantized KV type with ``flash_attn=False``.
    """
    if n_ctx is None or ram_bytes is not None:
        return plan_memory(header, ram_bytes=ram_bytes or available_ram_bytes(), n_ctx=n_ctx, kv_type=kv_type,
                           flash_attn=flash_attn, n_threads=n_threads, n_batch=n_batch, helper_n_ctx=helper_n_ctx)
    kind: KVType = kv_type or "f16"
    fa = flash_attn if flash_attn is not None else kind not in ("f16", "f32")
    plan = estimate_memory(header, n_ctx=n_ctx, kv_type=kind, flash_attn=fa, n_threads=n_threads, n_batch=n_batch,
                           helper_n_ctx=helper_n_ctx)
    refuse_beyond_machine(header, plan)
    return plan


def refuse_beyond_machine(header: ModelHeader, plan: MemoryPlan) -> None:
    """Refuse a fixed window that needs more memory than this machine has at all (``total_ram_bytes``): llama.cpp
    would fail to allocate it (``std::bad_alloc``) or the system would kill the process. A plan that only exceeds
    what is free now is left to run, as without the planner.

    Raises:
        MemoryPlanError: the message names the window, the memory, the model's trained context and a window that
            fits now (``plan_memory``), with ``{n_ctx}`` fields for the setting (``VenusEdgeError.message_for``).
    """
    machine = total_ram_bytes()
    if machine is None or plan.total_bytes <= machine:
        return
    trained = f"; the model was trained on {header.n_ctx_train:,} tokens" if header.n_ctx_train else ""
    try:
        fits = plan_memory(header, ram_bytes=available_ram_bytes(), kv_type=plan.kv_type if plan.kv_type != "f32"
                           else None, n_threads=plan.n_threads, n_batch=plan.n_batch, helper_n_ctx=plan.helper_n_ctx)
        fix = f"give {{n_ctx}} {fits.n_ctx} (it fits in the memory free now), or leave {{n_ctx}} out to choose it"
    except (MemoryPlanError, OSError):
        fix = "give a smaller {n_ctx}"
    template = (f"{{n_ctx}} {plan.n_ctx:,} needs {format_bytes(plan.total_bytes)} (KV cache "
                f"{format_bytes(plan.kv_bytes)}), more than this machine's {format_bytes(machine)} of RAM{trained}: "
                f"{fix}")
    raise MemoryPlanError(template, needed_bytes=plan.total_bytes, usable_bytes=machine, names_settings=True)


def _refusal(header: ModelHeader, smallest: MemoryPlan, n_ctx: int | None, kv_type: KVType | None,
             flash_attn: bool | None, max_n_ctx: int) -> str:
    """The refusal message: the sizes, and what would fit instead."""
    assert smallest.ram_bytes is not None and smallest.usable_bytes is not None
    given = (f"{format_bytes(smallest.ram_bytes)} given ({format_bytes(smallest.usable_bytes)} usable after "
             f"{HEADROOM_FRACTION:.0%} headroom)")
    ram_needed = _round_up_gib(smallest.total_bytes / (smallest.usable_bytes / smallest.ram_bytes))
    fixes = [f"--ram {ram_needed}G"]
    base = smallest.weights_bytes + smallest.overhead_bytes
    if base > smallest.usable_bytes:
        what = (f"{format_bytes(smallest.weights_bytes)} for the weights alone ({format_bytes(base)} with the "
                f"process)")
    else:
        helper = f", helper context {format_bytes(smallest.helper_bytes)}" if smallest.helper_n_ctx else ""
        what = (f"{format_bytes(smallest.total_bytes)} for the smallest plan (n_ctx {smallest.n_ctx:,}, "
                f"{smallest.kv_type} KV cache: weights {format_bytes(smallest.weights_bytes)}, KV cache "
                f"{format_bytes(smallest.kv_bytes)}, compute {format_bytes(smallest.compute_bytes)}{helper})")
    if n_ctx is not None and base < smallest.usable_bytes:
        try:
            freer = plan_memory(header, ram_bytes=smallest.ram_bytes, kv_type=kv_type, flash_attn=flash_attn,
                                n_threads=smallest.n_threads, n_batch=smallest.n_batch,
                                helper_n_ctx=smallest.helper_n_ctx, max_n_ctx=max(max_n_ctx, n_ctx),
                                cpu_features=frozenset())
            fixes.insert(0, f"--n-ctx {freer.n_ctx} ({freer.kv_type} KV cache)")
        except MemoryPlanError:
            pass
    quant = _smaller_quant(header, smallest)
    if quant is not None:
        fixes.insert(0, f"a {quant} of this model")
    name = header.path or header.metadata.get("general.name") or "the model"
    return f"{name} needs {what} with {given}; {' or '.join(fixes)} would fit"


def _round_up_gib(n_bytes: float) -> str:
    """The next half GiB up, as ``4`` or ``4.5``."""
    halves = math.ceil(n_bytes / (1 << 29))
    return f"{halves // 2}" if halves % 2 == 0 else f"{halves / 2:.1f}"


def _smaller_quant(header: ModelHeader, smallest: MemoryPlan) -> str | None:
    """The finest common quant type whose smallest plan would fit, judged from the parameter count."""
    if not header.n_params or smallest.usable_bytes is None:
        return None
    current_bits = 8 * header.weight_bytes / header.n_params
    for name, bits in QUANT_BITS_PER_WEIGHT.items():
        if bits >= current_bits - 0.05:
            continue
        weights = int(header.n_params * bits / 8)
        if smallest.total_bytes - smallest.weights_bytes + weights <= smallest.usable_bytes:
            return name
    return None


def header_from_dims(
    *, n_params: int, bits_per_weight: float, n_layer: int, n_head: int, n_head_kv: int, n_embd: int,
    head_dim: int, n_ff: int, n_vocab: int, n_ctx_train: int, file_type: str, architecture: str = "qwen3",
    name: str | None = None,
) -> ModelHeader:
    """A ``ModelHeader`` for a model known by its dimensions (no file), with weights of
    ``n_params * bits_per_weight / 8`` bytes: for presets such as the README's DR-Venus-4B table."""
    return ModelHeader(
        architecture=architecture, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, n_embd=n_embd,
        head_dim_k=head_dim, head_dim_v=head_dim, n_ff=n_ff, n_vocab=n_vocab, n_ctx_train=n_ctx_train,
        weight_bytes=int(n_params * bits_per_weight / 8), file_type=file_type, n_params=n_params,
        metadata={"general.name": name} if name else {},
    )
