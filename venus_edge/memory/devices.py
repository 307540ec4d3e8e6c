"""Device presets: phones and laptops by their RAM, with the share the system and other apps keep, so the memory
planner answers "what runs on an 8 GB phone" from any machine (``venus-edge plan MODEL --device phone-8gb``).

    plan = plan_on_device(read_model_header("model.gguf"), device_preset("phone-8gb"))
    print(device_plans_table())     # DR-Venus-4B and the small models on each phone

What a device keeps. A phone's RAM is not an app's: the kernel and its carve-outs (modem, GPU, camera), the system
services (Android's system_server, SystemUI, Play services) and the apps in the background hold a part that is
roughly fixed per OS release, so the share kept falls as RAM grows. Android's low-memory killer (lmkd) ends the
background apps before the one in front, but not the system; iOS gives each app a limit (jetsam). The presets keep
``2.25 GiB + 12.5 %`` of a phone's RAM (``PHONE_KEPT_FIXED_BYTES``, ``PHONE_KEPT_SHARE``): OUR ESTIMATE, drawn
through the public figures below, not a measurement of ours.

- 4 GB: about 1.4 GB available to an app on a 4 GB Realme 2 Pro (measured, github.com/nareshis21/Truelarge-RT,
  README); the formula leaves 1.25 GiB (1.34 GB).
- 8 GB: the Off Grid app (github.com/alichherawalla/off-grid-mobile-ai, docs: technical/memory-management) blocks
  a model load above 60 % of RAM, 4.8 GB of 8 GB, as the most an app can use without being killed; the formula
  leaves 4.75 GiB (59 %).
- 16 GB: iPadOS 26.0-26.3 let one app use about 75 % of an 8 GB iPad, 26.4 about 37.5 % (developer.apple.com/
  forums/thread/826325, measured through Apple's API); the formula leaves 11.75 GiB (73 %) of 16 GB. The iPad's
  halving between releases is why these are presets, not promises.
- 6 GB and 12 GB: the formula between those points (estimates).
Laptops keep ``3 GiB + 12.5 %`` (a desktop session with a browser open; OUR ESTIMATE).

The planner's check that the weights stay resident: a device plan is the planner's ordinary plan
(``plan_memory``) for the app's budget, so weights, KV cache, compute buffers and process must fit in it less the
headroom. llama.cpp maps the weights from the file (mmap), so a model larger than the room still loads, and then
reads its weights back from flash at every token (public reports: a 3B Q4_K_M on a 4-6 GB phone crawls).
``plan_on_device`` refuses that plan and names what fits: a smaller quant of the model, a smaller model of
``PRESET_MODELS``, or a device with more RAM.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal

from venus_edge.errors import MemoryPlanError
from venus_edge.memory.header import ModelHeader
from venus_edge.memory.plan import (
    DEFAULT_N_BATCH,
    HEADROOM_FRACTION,
    QUANT_BITS_PER_WEIGHT,
    KVType,
    MemoryPlan,
    format_bytes,
    plan_memory,
)
from venus_edge.memory.presets import PRESET_MODELS, header_at_quant, preset_model_header

__all__ = ["DEVICE_PRESETS", "LAPTOP_KEPT_FIXED_BYTES", "PHONE_KEPT_FIXED_BYTES", "PHONE_KEPT_SHARE",
           "TABLE_MODELS", "DevicePreset", "device_plans_table", "device_preset", "device_presets_table",
           "plan_on_device"]

_GiB = 1 << 30
#: What a phone's system and other apps keep besides ``PHONE_KEPT_SHARE`` of its RAM (estimate: module docstring).
PHONE_KEPT_FIXED_BYTES = int(2.25 * _GiB)
#: The share of a device's RAM kept besides the fixed part (phones and laptops; estimate: module docstring).
PHONE_KEPT_SHARE = 0.125
#: What a laptop's desktop session and browser keep besides ``PHONE_KEPT_SHARE`` of its RAM (estimate).
LAPTOP_KEPT_FIXED_BYTES = 3 * _GiB


@dataclass(frozen=True)
class DevicePreset:
    """A device by its RAM, and what of it an app can keep resident.

    Attributes:
        name: the preset's name (``phone-8gb``), as ``--device`` takes it.
        kind: ``phone`` or ``laptop``.
        ram_bytes: the device's RAM (8 GB phones carry 8 GiB of chips).
        kept_bytes: what the system and other apps keep (module docstring).
        source: where the figure comes from, in a few words (the module docstring cites each).
    """

    name: str
    kind: Literal["phone", "laptop"]
    ram_bytes: int
    kept_bytes: int
    source: str

    @property
    def app_bytes(self) -> int:
        """RAM an app can keep resident: ``ram_bytes - kept_bytes``; the plan's budget (``plan_on_device``)."""
        return self.ram_bytes - self.kept_bytes

    def to_dict(self) -> dict[str, Any]:
        """The preset as a JSON-ready dict, with ``app_bytes``."""
        return {"name": self.name, "kind": self.kind, "ram_bytes": self.ram_bytes, "kept_bytes": self.kept_bytes,
                "app_bytes": self.app_bytes, "source": self.source}


def _preset(kind: Literal["phone", "laptop"], gib: int, source: str) -> DevicePreset:
    fixed = PHONE_KEPT_FIXED_BYTES if kind == "phone" else LAPTOP_KEPT_FIXED_BYTES
    ram = gib * _GiB
    return DevicePreset(f"{kind}-{gib}gb", kind, ram, fixed + int(PHONE_KEPT_SHARE * ram), source)


#: The presets by name, smallest first within each kind.
DEVICE_PRESETS: dict[str, DevicePreset] = {preset.name: preset for preset in (
    _preset("phone", 4, "measured: about 1.4 GB free on a 4 GB phone"),
    _preset("phone", 6, "estimate"),
    _preset("phone", 8, "an app's 60 % limit in Off Grid"),
    _preset("phone", 12, "estimate"),
    _preset("phone", 16, "estimate; iPadOS gave an app 75 %, then 37.5 %"),
    _preset("laptop", 8, "estimate"),
    _preset("laptop", 16, "estimate"),
    _preset("laptop", 32, "estimate"),
)}


def device_preset(name: str) -> DevicePreset:
    """The preset called ``name`` (case does not matter: ``phone-8gb``, ``Phone-8GB``).

    Raises:
        ValueError: an unknown name; the message suggests the nearest and lists them all.
    """
    key = name.strip().lower()
    if key in DEVICE_PRESETS:
        return DEVICE_PRESETS[key]
    near = difflib.get_close_matches(key, DEVICE_PRESETS, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    raise ValueError(f"no device preset {name!r}; {hint}the presets are {', '.join(DEVICE_PRESETS)}")


def _model_name(header: ModelHeader) -> str:
    name = header.metadata.get("general.name") or (header.path.name if header.path else "the model")
    return f"{name} {header.file_type}" if header.file_type and header.file_type not in str(name) else str(name)


def plan_on_device(
    header: ModelHeader,
    device: DevicePreset,
    *,
    n_ctx: int | None = None,
    kv_type: KVType | None = None,
    n_threads: int | None = None,
    n_batch: int = DEFAULT_N_BATCH,
    helper_n_ctx: int = 0,
    cpu_features: frozenset[str] = frozenset(),
) -> MemoryPlan:
    """The plan for ``header``'s model on ``device``: ``plan_memory`` with the app's budget
    (``device.app_bytes``) as ``ram_bytes``, everything resident.

    Args:
        header: the model (``read_model_header``, or ``preset_model_header``).
        device: the device (``device_preset``).
        n_ctx, kv_type, n_threads, n_batch, helper_n_ctx: as ``plan_memory`` takes them.
        cpu_features: the device's llama.cpp CPU features (default none: the fit does not depend on them).

    Raises:
        MemoryPlanError: the plan would not stay resident (llama.cpp would page the weights from flash); the
            message names the sizes and what fits: a smaller quant, a smaller model, a device with more RAM.
        ValueError: as ``plan_memory``.
    """
    settings: dict[str, Any] = {"n_ctx": n_ctx, "kv_type": kv_type, "n_threads": n_threads, "n_batch": n_batch,
                                "helper_n_ctx": helper_n_ctx, "cpu_features": cpu_features}
    try:
        return plan_memory(header, ram_bytes=device.app_bytes, **settings)
    except MemoryPlanError as error:
        raise MemoryPlanError(_refusal(header, device, error, settings), needed_bytes=error.needed_bytes,
                              usable_bytes=error.usable_bytes) from error


def _fits(header: ModelHeader | None, device: DevicePreset, settings: dict[str, Any]) -> MemoryPlan | None:
    if header is None:
        return None
    try:
        return plan_memory(header, ram_bytes=device.app_bytes, **settings)
    except MemoryPlanError:
        return None


def _described(plan: MemoryPlan) -> str:
    return f"n_ctx {plan.n_ctx:,}, {plan.kv_type} KV cache, {format_bytes(plan.total_bytes)}"


def _refusal(header: ModelHeader, device: DevicePreset, error: MemoryPlanError, settings: dict[str, Any]) -> str:
    """What does not fit on ``device``, why that is refused, and what fits instead."""
    fixes = []
    bits = 8 * header.weight_bytes / header.n_params if header.n_params else None
    for quant, quant_bits in QUANT_BITS_PER_WEIGHT.items():  # finest first: the first that fits
        if bits is not None and quant_bits < bits - 0.05:
            plan = _fits(header_at_quant(header, quant), device, settings)
            if plan is not None:
                fixes.append(f"a {quant} of this model ({_described(plan)})")
                break
    for name in PRESET_MODELS:  # largest first: the largest smaller model that fits, at its finest phone type
        candidates = [preset_model_header(name, quant) for quant in ("Q8_0", "Q4_0")]
        if header.n_params and candidates[0].n_params >= header.n_params:
            continue
        found = next(((c, p) for c in candidates if (p := _fits(c, device, settings)) is not None), None)
        if found is not None:
            fixes.append(f"{name} {found[0].file_type} ({_described(found[1])})")
            break
    larger = [d for d in DEVICE_PRESETS.values() if d.kind == device.kind and d.ram_bytes > device.ram_bytes]
    roomier = next((d for d in larger if _fits(header, d, settings) is not None), None)
    if roomier is not None:
        fixes.append(f"--device {roomier.name}")
    instead = "; ".join(fixes) if fixes else "none of the presets' smaller quants, models or devices"
    return (f"{_model_name(header)} does not stay resident on {device.name}: it needs "
            f"{format_bytes(error.needed_bytes)} (weights {format_bytes(header.weight_bytes)}), and an app keeps "
            f"{format_bytes(error.usable_bytes)} there ({format_bytes(device.ram_bytes)} of RAM less "
            f"{format_bytes(device.kept_bytes)} kept by the system and other apps, less {HEADROOM_FRACTION:.0%} "
            f"headroom); llama.cpp would read the weights back from flash at every token. What fits: {instead}")


def device_presets_table() -> str:
    """The presets as a Markdown table: RAM, what the system and other apps keep, an app's budget, and the part of
    it a plan may fill (less ``HEADROOM_FRACTION``)."""
    rows = ["| device | RAM | kept by the system and other apps | an app's budget | a plan may fill | figure |",
            "|---|---|---|---|---|---|"]
    for device in DEVICE_PRESETS.values():
        rows.append(f"| {device.name} | {format_bytes(device.ram_bytes)} | {format_bytes(device.kept_bytes)} | "
                    f"{format_bytes(device.app_bytes)} | {format_bytes(device.app_bytes * (1 - HEADROOM_FRACTION))} "
                    f"| {device.source} |")
    return "\n".join(rows)


#: The rows of ``device_plans_table``: (model of ``PRESET_MODELS``, quant type).
TABLE_MODELS: tuple[tuple[str, str], ...] = (
    ("DR-Venus-4B", "Q4_0"), ("DR-Venus-4B", "Q4_K_M"), ("DR-Venus-4B", "Q8_0"), ("Qwen3-1.7B", "Q4_0"),
    ("Qwen3-1.7B", "Q8_0"), ("Qwen3-0.6B", "Q8_0"), ("SmolLM2-135M", "Q8_0"),
)


def device_plans_table(kind: Literal["phone", "laptop"] = "phone", helper_n_ctx: int = 8_192) -> str:
    """What each model of ``TABLE_MODELS`` gets on each preset of ``kind``, as ``venus-edge plan --device`` plans
    it (visit's helper context of ``helper_n_ctx`` tokens included): window, KV-cache type (FA: flash attention)
    and the total, or "pages" with what the smallest plan needs."""
    devices = [device for device in DEVICE_PRESETS.values() if device.kind == kind]
    rows = ["| model (weights) | " + " | ".join(device.name for device in devices) + " |",
            "|---|" + "---|" * len(devices)]
    for name, quant in TABLE_MODELS:
        model = preset_model_header(name, quant)
        cells = []
        for device in devices:
            try:
                plan = plan_on_device(model, device, helper_n_ctx=helper_n_ctx)
            except MemoryPlanError as error:
                cells.append(f"pages (needs {format_bytes(error.needed_bytes)})")
                continue
            fa = ", FA" if plan.flash_attn else ""
            cells.append(f"{plan.n_ctx // 1024}K {plan.kv_type}{fa} ({format_bytes(plan.total_bytes)})")
        rows.append(f"| {name} {quant} ({format_bytes(model.weight_bytes)}) | " + " | ".join(cells) + " |")
    return "\n".join(rows)
