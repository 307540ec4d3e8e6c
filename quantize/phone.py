"""The phone profile of `venus-edge quantize --target phone`, and the check that a GGUF source is a master.

    venus-edge quantize CHECKPOINT --target phone --out DIR

writes the full-precision master (``NAME-f16.gguf``, or ``--base-type bf16``/``f32``) and ``PHONE_TYPES`` beside it,
and prints what each file needs on the memory planner's phone presets (``phone_memory_lines``).

Why Q4_0 and Q8_0: llama.cpp removed its ARM-specific quant types (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8); an ARM build
with the dot-product / i8mm features repacks plain Q4_0 (and Q8_0) at load time into those layouts instead, so
these two run fast on every such build since that change. Recent builds (ggml-cpu/repack.cpp in the llama.cpp this
package vendors) also repack Q4_K, Q5_K and Q6_K on ARM, but the apps and older builds a phone GGUF meets may not.

Why the master is kept: a quantized file quantizes badly again (the second rounding starts from the first one's
errors; llama.cpp's quantizer refuses it without ``--allow-requantize``), so every later type must come from the
F16/BF16/F32 file. ``check_master`` refuses a quantized GGUF source and names the master beside it, if there is one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from venus_edge.errors import MemoryPlanError
from venus_edge.memory.devices import DEVICE_PRESETS, plan_on_device
from venus_edge.memory.header import FILE_TYPES, ModelHeader, read_model_header
from venus_edge.memory.plan import format_bytes

from .errors import GGUFReadError, QuantizedSourceError
from .gguf_info import GGUFHeader, ggml_type_name, read_gguf_header

__all__ = ["FULL_PRECISION_TYPES", "PHONE_TYPES", "check_master", "find_master_beside", "master_type",
           "phone_memory_line", "phone_memory_lines"]

#: The quant types of the phone profile: the ones ARM builds of llama.cpp repack at load time (module docstring).
PHONE_TYPES: tuple[str, ...] = ("Q4_0", "Q8_0")
#: ggml tensor types of a master: quantizing from these loses nothing before the quantizer's own rounding.
FULL_PRECISION_TYPES = frozenset({"F32", "F16", "BF16"})


def _quantized_type(header: GGUFHeader) -> str | None:
    """The file type of a GGUF holding any tensor outside ``FULL_PRECISION_TYPES``, or None for a master.

    The tensors decide (``general.file_type`` is only a label); the name is the label's when it has one, else the
    most common quantized tensor type."""
    quantized = Counter(name for tensor in header.tensors
                        if (name := ggml_type_name(tensor.ggml_type)) not in FULL_PRECISION_TYPES)
    if not quantized:
        return None
    label = header.metadata.get("general.file_type")
    if isinstance(label, int) and label in FILE_TYPES and FILE_TYPES[label] not in FULL_PRECISION_TYPES:
        return FILE_TYPES[label]
    return quantized.most_common(1)[0][0]


def master_type(header: GGUFHeader) -> str:
    """A master's type name (``F16``, ``BF16``, ``F32``): its ``general.file_type`` label, else its 2-D tensors'."""
    label = header.metadata.get("general.file_type")
    if isinstance(label, int) and FILE_TYPES.get(label) in FULL_PRECISION_TYPES:
        return FILE_TYPES[label]
    types = Counter(ggml_type_name(t.ggml_type) for t in header.tensors if len(t.shape) >= 2)
    return types.most_common(1)[0][0] if types else "F32"


def find_master_beside(path: Path) -> Path | None:
    """The first GGUF (by name) in ``path``'s folder, other than ``path``, whose tensors are all full precision;
    None when there is none. Unreadable GGUF files there are passed over."""
    for candidate in sorted(path.parent.glob("*.gguf")):
        if candidate.resolve() == path.resolve() or not candidate.is_file():
            continue
        try:
            if _quantized_type(read_gguf_header(candidate)) is None:
                return candidate
        except GGUFReadError:
            continue
    return None


def check_master(path: Path) -> tuple[GGUFHeader, str]:
    """Read a GGUF source and check it is a master; returns its header and type name (``F16``).

    Raises:
        GGUFReadError: missing, not GGUF, corrupt or truncated (the message names the path).
        QuantizedSourceError: a quantized file; the message names the master beside it, or says to convert the
            checkpoint. Nothing is written either way.
    """
    header = read_gguf_header(path)
    quantized = _quantized_type(header)
    if quantized is not None:
        raise QuantizedSourceError(path, quantized, find_master_beside(path))
    return header, master_type(header)


def phone_memory_line(name: str, header: ModelHeader, *, helper_n_ctx: int) -> str:
    """One line: what ``plan_on_device`` gives ``header`` on each phone preset of ``DEVICE_PRESETS``, e.g.
    ``M-Q4_0.gguf: phone-4gb no plan (needs 1.9 GiB, would page from flash); phone-6gb fits: n_ctx 32,768, q8_0
    KV cache, 2.8 GiB; ...``. ``helper_n_ctx`` as ``plan_on_device`` takes it (``venus-edge plan`` uses the
    engine's ``DEFAULT_HELPER_N_CTX``)."""
    cells = []
    for device in DEVICE_PRESETS.values():
        if device.kind != "phone":
            continue
        try:
            plan = plan_on_device(header, device, helper_n_ctx=helper_n_ctx)
        except MemoryPlanError as error:
            cells.append(f"{device.name} no plan (needs {format_bytes(error.needed_bytes)}, "
                         "would page from flash)")
            continue
        cells.append(f"{device.name} fits: n_ctx {plan.n_ctx:,}, {plan.kv_type} KV cache, "
                     f"{format_bytes(plan.total_bytes)}")
    return f"{name}: " + "; ".join(cells)


def phone_memory_lines(files: Sequence[Path], *, helper_n_ctx: int) -> list[str]:
    """``phone_memory_line`` for each GGUF file, read with the planner's header reader."""
    return [phone_memory_line(path.name, read_model_header(path), helper_n_ctx=helper_n_ctx) for path in files]
