"""What this device is and what to run on it (``venus-edge doctor``): the CPU's architecture and the features
llama.cpp uses, performance and efficiency cores, RAM, thermal zones, the llama.cpp build (its backends and its own
system info), and for a model the quant, threads, n_ctx and KV-cache type to run it with.

    report = diagnose(header=read_model_header("model.gguf"), llama_info=llama_system_info())
    print(report.render())          # or json.dumps(report.to_dict())

Everything is read from /proc and /sys (Linux and Android) under ``root``, so a test or a person can point it at a
copy of another device's files. A file that is missing, unreadable or not what it should be makes that one fact
unknown, said in ``DoctorReport.unknown`` with the path and why; the rest is still reported. Nothing loads a model:
the model's part reads its GGUF header and asks the memory planner.

Where the facts come from:
- features: ``flags`` (x86) or ``Features`` (ARM) in /proc/cpuinfo, under the names llama.cpp prints them
  (``CPU_FEATURES``; ``ggml_backend_cpu_get_features`` in ggml-cpu.cpp); a feature counts when every CPU has it.
- cores: the clusters of ``venus_edge.memory.sysfs.core_groups`` (by ``cpuinfo_max_freq``, else ``cpu_capacity``);
  on a big.LITTLE device the slowest cluster is the efficiency cores and llama.cpp's threads go to the others (a
  thread on a little core holds every other thread at each step, ``threads_that_fit``).
- RAM: ``MemTotal`` and ``MemAvailable`` in /proc/meminfo. Thermal: /sys/class/thermal/thermal_zone*/``temp``
  (millidegrees Celsius) and ``type``, read by ``venus_edge.memory.sensors`` (as pacing reads them).
- the recommendation: the finest quant type, of those the CPU's llama.cpp kernels favour (an ARM build repacks
  Q4_0 and Q8_0 for its dot-product and i8mm kernels; x86 runs the K-quants), whose plan (``plan_memory`` against
  the RAM available now) keeps a window of ``min(the model's cap, Q4_0_BELOW_N_CTX)`` tokens; else the longest
  window; threads = the performance cores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venus_edge.errors import MemoryPlanError
from venus_edge.memory.header import ModelHeader
from venus_edge.memory.machine import llama_features_of
from venus_edge.memory.plan import (
    DEFAULT_MAX_N_CTX,
    Q4_0_BELOW_N_CTX,
    MemoryPlan,
    format_bytes,
    plan_memory,
)
from venus_edge.memory.presets import header_at_quant
from venus_edge.memory.sensors import read_thermal_zones
from venus_edge.memory.sysfs import CoreGroup, UnknownFact, core_groups, read_fact

__all__ = ["CPU_FEATURES", "DoctorReport", "Recommendation", "diagnose", "llama_backends",
           "recommend_settings"]

#: The CPU features llama.cpp uses, by the name its system info prints, and the /proc/cpuinfo flag that shows it.
CPU_FEATURES: dict[str, dict[str, str]] = {
    "x86": {"AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "AVX_VNNI": "avx_vnni",
            "AVX512": "avx512f", "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8"},
    "arm": {"NEON": "asimd", "FP16_VA": "asimdhp", "DOTPROD": "asimddp", "MATMUL_INT8": "i8mm", "SVE": "sve",
            "SME": "sme"},
}
#: The quant types to choose from, finest first: every ARM build since the ARM-specific types went repacks Q4_0
#: and Q8_0 at load for its dot-product and i8mm kernels (ggml-cpu/repack.cpp; recent ones also the K-quants); x86
#: builds run the K-quants (and repack Q4_K with AVX2).
RECOMMENDED_QUANTS: dict[str, tuple[str, ...]] = {"arm": ("Q8_0", "Q4_0"), "x86": ("Q8_0", "Q6_K", "Q4_K_M")}


@dataclass(frozen=True)
class Recommendation:
    """What to run a model with on this device.

    Attributes:
        model: the model's name.
        quant: the quant type to run, or None when none fits.
        n_threads: decode threads (the performance cores).
        plan: the memory plan of ``quant`` (n_ctx, KV-cache type, flash attention, bytes), or None.
        reason: why, in a sentence (or why nothing fits).
    """

    model: str
    quant: str | None
    n_threads: int
    plan: MemoryPlan | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the plan's as ``MemoryPlan.to_dict``)."""
        return {"model": self.model, "quant": self.quant, "n_threads": self.n_threads, "reason": self.reason,
                "n_ctx": self.plan.n_ctx if self.plan else None,
                "kv_type": self.plan.kv_type if self.plan else None,
                "flash_attn": self.plan.flash_attn if self.plan else None,
                "plan": self.plan.to_dict() if self.plan else None}


@dataclass(frozen=True)
class DoctorReport:
    """What ``diagnose`` found. A field that could not be read is None (or empty) and ``unknown`` says why.

    Attributes:
        root: the folder /proc and /sys were read under.
        architecture: ``x86_64``, ``aarch64`` ... (from /proc/cpuinfo).
        cpu_name: ``model name`` (x86) or ``Hardware`` (Android), if given.
        logical_cpus: ``processor`` entries in /proc/cpuinfo.
        cpu_features: each feature of ``CPU_FEATURES`` for the architecture -> whether every CPU has it.
        core_groups: the CPUs by speed, fastest first.
        ram_total_bytes, ram_available_bytes: ``MemTotal``, ``MemAvailable``.
        thermal_c: thermal zone (``type``, else its folder) -> degrees Celsius.
        llama_system_info: llama.cpp's ``llama_print_system_info`` (the build running this Python), or None.
        llama_backends: the backends compiled in (``CPU``, ``CUDA``, ``Metal`` ...), from that string.
        llama_features: the CPU features that build uses (``AVX2`` ...), from that string.
        unused_features: features this CPU has that this llama.cpp build does not use (only when ``root`` is
            this machine's).
        recommendation: for a model, what to run it with; None without one.
        unknown: what could not be read, each with its path and reason.
    """

    root: str
    architecture: str | None
    cpu_name: str | None
    logical_cpus: int | None
    cpu_features: dict[str, bool]
    core_groups: tuple[CoreGroup, ...]
    ram_total_bytes: int | None
    ram_available_bytes: int | None
    thermal_c: dict[str, float]
    llama_system_info: str | None
    llama_backends: tuple[str, ...]
    llama_features: tuple[str, ...]
    unused_features: tuple[str, ...]
    recommendation: Recommendation | None
    unknown: tuple[str, ...] = field(default=())

    def cores(self, kind: str) -> int | None:
        """Physical cores of ``kind`` (``performance`` or ``efficiency``), or None when no core was found."""
        if not self.core_groups:
            return None
        return sum(group.cores for group in self.core_groups if group.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {
            "root": self.root, "architecture": self.architecture, "cpu_name": self.cpu_name,
            "logical_cpus": self.logical_cpus, "cpu_features": self.cpu_features,
            "performance_cores": self.cores("performance"), "efficiency_cores": self.cores("efficiency"),
            "core_groups": [vars(group) | {"cpus": list(group.cpus)} for group in self.core_groups],
            "ram_total_bytes": self.ram_total_bytes, "ram_available_bytes": self.ram_available_bytes,
            "thermal_c": self.thermal_c,
            "llama_cpp": {"system_info": self.llama_system_info, "backends": list(self.llama_backends),
                          "features": list(self.llama_features), "unused_features": list(self.unused_features)},
            "recommendation": self.recommendation.to_dict() if self.recommendation else None,
            "unknown": list(self.unknown),
        }

    def render(self) -> str:
        """The report for people, a fact a line; unknown facts are listed last with their reasons."""
        def size(n_bytes: int | None) -> str:
            return "unknown" if n_bytes is None else format_bytes(n_bytes)

        features = ", ".join(f"{name} {'yes' if has else 'no'}" for name, has in self.cpu_features.items())
        lines = [f"CPU          {self.architecture or 'unknown architecture'}"
                 + (f", {self.cpu_name}" if self.cpu_name else "")
                 + (f", {self.logical_cpus} logical CPUs" if self.logical_cpus else ""),
                 f"features     {features or 'unknown'}"]
        if self.core_groups:
            def listed(kind: str) -> str:
                return " + ".join(group.describe() for group in self.core_groups if group.kind == kind)
            efficiency = f", {self.cores('efficiency')} efficiency ({listed('efficiency')})" \
                if self.cores("efficiency") else ""
            lines.append(f"cores        {self.cores('performance')} performance ({listed('performance')})"
                         f"{efficiency}")
        else:
            lines.append("cores        unknown")
        lines.append(f"RAM          {size(self.ram_total_bytes)} total, {size(self.ram_available_bytes)} available")
        thermal = ", ".join(f"{zone} {celsius:.1f} C" for zone, celsius in self.thermal_c.items())
        lines.append(f"thermal      {thermal or 'unknown'}")
        if self.llama_system_info is not None:
            lines.append(f"llama.cpp    backends {', '.join(self.llama_backends) or 'unknown'}; uses "
                         f"{', '.join(self.llama_features) or 'no listed feature'}")
            lines.append(f"  system info  {self.llama_system_info.strip()}")
            if self.unused_features:
                lines.append(f"  this CPU also has {', '.join(self.unused_features)}, which this llama.cpp build "
                             "does not use: a build for this CPU may decode faster (CMAKE_ARGS=\"-DGGML_NATIVE=ON\" "
                             f"pip install --force-reinstall --no-binary llama-cpp-python {_llama_cpp_requirement()})")
        else:
            lines.append("llama.cpp    unknown")
        rec = self.recommendation
        if rec is not None and rec.plan is not None:
            fa = " with flash attention" if rec.plan.flash_attn else ""
            lines.append(f"run {rec.model}: {rec.quant}, {rec.n_threads} threads, n_ctx {rec.plan.n_ctx:,}, KV cache "
                         f"{rec.plan.kv_type}{fa} ({format_bytes(rec.plan.total_bytes)})")
            lines.append(f"  {rec.reason}")
        elif rec is not None:
            lines.append(f"run {rec.model}: nothing fits; {rec.reason}")
        if self.unknown:
            lines.append("unknown:")
            lines += [f"  - {reason}" for reason in self.unknown]
        return "\n".join(lines)


def _cpuinfo(root: Path, unknown: list[str]) -> tuple[str | None, str | None, int | None, set[str] | None, str]:
    """(architecture, name, logical CPUs, the flags every CPU has, family ``x86``/``arm``/``""``) of /proc/cpuinfo."""
    path = root / "proc" / "cpuinfo"
    try:
        text = read_fact(path)
    except UnknownFact as exc:
        unknown.append(f"CPU architecture, name and features: {exc}")
        return None, None, None, None, ""
    fields: dict[str, str] = {}
    flag_sets: list[set[str]] = []
    family, processors = "", 0
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            continue
        processors += key == "processor"
        if key in ("flags", "Features"):
            family = "x86" if key == "flags" else "arm"
            flag_sets.append(set(value.split()))
        fields.setdefault(key, value.strip())
    if not flag_sets:
        unknown.append(f"CPU features: {path} lists no 'flags' (x86) or 'Features' (ARM) line")
        return None, fields.get("model name") or fields.get("Hardware"), processors or None, None, ""
    flags = set.intersection(*flag_sets)
    if family == "x86":
        architecture = "x86_64" if "lm" in flags else "x86"
    else:
        architecture = "aarch64" if fields.get("CPU architecture", "8") == "8" or "asimd" in flags else "arm"
    return architecture, fields.get("model name") or fields.get("Hardware"), processors or None, flags, family


def _meminfo(root: Path, unknown: list[str]) -> tuple[int | None, int | None]:
    """(``MemTotal``, ``MemAvailable``) of /proc/meminfo in bytes; each None when unknown."""
    path = root / "proc" / "meminfo"
    try:
        text = read_fact(path)
    except UnknownFact as exc:
        unknown.append(f"RAM: {exc}")
        return None, None
    values: dict[str, int | None] = {}
    for key in ("MemTotal", "MemAvailable"):
        match = re.search(rf"^{key}:\s*(\S+)\s*kB\s*$", text, re.MULTILINE)
        if match is None or not match.group(1).isdigit():
            unknown.append(f"RAM: {path} has no '{key}: N kB' line")
            values[key] = None
        else:
            values[key] = int(match.group(1)) * 1024
    return values["MemTotal"], values["MemAvailable"]


def _thermal(root: Path, unknown: list[str]) -> dict[str, float]:
    """Thermal zone name -> degrees Celsius (``sensors.read_thermal_zones``)."""
    return {zone.name: zone.celsius for zone in read_thermal_zones(root, unknown)}


def _llama_cpp_requirement() -> str:
    """``llama-cpp-python==X``, the version installed (the one venus-edge was set up with), for a reinstall that
    keeps it; without the pin when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"llama-cpp-python=={version('llama_cpp_python')}"
    except PackageNotFoundError:
        return "llama-cpp-python"


def llama_backends(info: str) -> tuple[str, ...]:
    """The backends a ``llama_system_info`` string lists (``CPU : SSE3 = 1 | ...`` -> ``("CPU",)``), in order."""
    names = re.findall(r"(?:^|\|)\s*([A-Za-z][\w-]*)\s+:\s", info)
    return tuple(dict.fromkeys(names))


def recommend_settings(header: ModelHeader, *, family: str, available_bytes: int, n_threads: int,
                       cpu_features: frozenset[str], helper_n_ctx: int = 0) -> Recommendation:
    """What to run ``header``'s model with: the finest quant of ``RECOMMENDED_QUANTS[family]`` whose plan keeps a
    window of ``min(cap, Q4_0_BELOW_N_CTX)`` tokens in ``available_bytes``, else the one with the longest window
    (module docstring). A header without a parameter count is planned as its file is."""
    name = str(header.metadata.get("general.name") or (header.path.name if header.path else "the model"))
    quants = RECOMMENDED_QUANTS.get(family, RECOMMENDED_QUANTS["x86"])
    candidates = [(quant, header_at_quant(header, quant)) for quant in quants]
    if header.n_params == 0:
        candidates = [(header.file_type or "the file's type", header)]
    plans: dict[str, MemoryPlan] = {}
    refusal = ""
    for quant, model in candidates:
        assert model is not None  # header_at_quant returns None only without n_params, handled above
        try:
            plans[quant] = plan_memory(model, ram_bytes=available_bytes, n_threads=n_threads,
                                       helper_n_ctx=helper_n_ctx, cpu_features=cpu_features)
        except MemoryPlanError as exc:
            refusal = str(exc)
    if not plans:
        return Recommendation(name, None, n_threads, None, refusal)
    cap = min(header.n_ctx_train or DEFAULT_MAX_N_CTX, DEFAULT_MAX_N_CTX)
    target = min(cap, Q4_0_BELOW_N_CTX)
    reaching = [quant for quant in plans if plans[quant].n_ctx >= target]
    quant = reaching[0] if reaching else max(plans, key=lambda q: plans[q].n_ctx)
    why = (f"the finest of {', '.join(q for q, _ in candidates)} that keeps a {target:,}-token window" if reaching
           else f"none of {', '.join(q for q, _ in candidates)} keeps {target:,} tokens; the longest window")
    repack = " (an ARM build repacks Q4_0 and Q8_0 for its dot-product kernels)" if family == "arm" else ""
    return Recommendation(name, quant, n_threads, plans[quant],
                          f"{why} in the {format_bytes(available_bytes)} available{repack}; threads: the "
                          f"performance cores")


def diagnose(root: str | Path = "/", *, header: ModelHeader | None = None, llama_info: str | None = None,
           helper_n_ctx: int = 0) -> DoctorReport:
    """What the device under ``root`` is (/proc and /sys read there), and, given ``header``, what to run it with.

    Args:
        root: the folder holding ``proc`` and ``sys`` (``/``: this machine).
        header: a model to recommend settings for (``read_model_header``); None for none.
        llama_info: llama.cpp's system info (``llama_system_info()``), or None when llama-cpp-python is missing.
        helper_n_ctx: the window of visit's helper context, counted in the recommended plan.

    Never raises for what it reads: each unreadable fact is listed in ``DoctorReport.unknown``.
    """
    root = Path(root)
    unknown: list[str] = []
    architecture, name, logical, flags, family = _cpuinfo(root, unknown)
    wanted = CPU_FEATURES.get(family, {})
    cpu_features = {feature: flag in flags for feature, flag in wanted.items()} if flags is not None else {}
    groups = core_groups(root, unknown)
    total, available = _meminfo(root, unknown)
    thermal = _thermal(root, unknown)
    llama_features: frozenset[str] = frozenset()
    if llama_info is None:
        unknown.append("llama.cpp's backends and system info: llama-cpp-python is not installed")
    else:
        llama_features = llama_features_of(llama_info)
    this_machine = root.resolve() == Path("/")
    unused = tuple(f for f, has in cpu_features.items() if has and f not in llama_features) \
        if this_machine and llama_info is not None else ()
    recommendation = None
    if header is not None:
        performance = sum(g.cores for g in groups if g.kind == "performance") or logical or 1
        features = llama_features if this_machine and llama_info is not None else \
            frozenset(f for f, has in cpu_features.items() if has)
        if available is None:
            unknown.append("the recommendation: the RAM available is unknown")
        else:
            recommendation = recommend_settings(header, family=family, available_bytes=available,
                                                n_threads=performance, cpu_features=features,
                                                helper_n_ctx=helper_n_ctx)
    return DoctorReport(
        root=str(root), architecture=architecture, cpu_name=name, logical_cpus=logical, cpu_features=cpu_features,
        core_groups=groups, ram_total_bytes=total, ram_available_bytes=available, thermal_c=thermal,
        llama_system_info=llama_info, llama_backends=llama_backends(llama_info) if llama_info else (),
        llama_features=tuple(sorted(llama_features)), unused_features=unused, recommendation=recommendation,
        unknown=tuple(unknown),
    )
