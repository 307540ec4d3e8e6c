"""The ARM check: a GGUF decoded greedily by an aarch64 build of llama.cpp (under qemu) against the x86 wheel.

ARM builds of llama.cpp repack Q4_0 (and Q8_0, Q4_K) weights at load time into interleaved layouts for the
NEON dot-product / i8mm kernels (ggml-cpu's ``repack.cpp``), so a file that decodes well on a laptop runs other
arithmetic on a phone. `scripts/build_llama_arm.sh` cross-builds ``llama-greedy`` (`scripts/llama_greedy.cpp`)
from the same llama.cpp source the wheel is built from; `greedy_arm` runs it under ``qemu-aarch64 -cpu max``;
`greedy_x86` runs the same loop through llama-cpp-python with the same context settings; `compare_greedy` finds
the first position where the greedy tokens differ and the KL divergence between the two next-token
distributions there. Up to and including that position both builds saw the same tokens, so their distributions
are directly comparable.

Usage::

    prompt = arm_check_prompt(model_path)
    x86 = greedy_x86(model_path, prompt, 32)
    arm = greedy_arm(model_path, prompt, 32)
    comparison = compare_greedy(x86, arm)
    print(comparison.first_difference, comparison.max_kl)

qemu's decode speed (`GreedyRun.decode_tokens_per_s`) is an emulator's, not a phone's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from venus_edge.testing import cache_dir

from .errors import ArmToolMissingError
from .evaluate import _kl_per_position

__all__ = [
    "ARM_CHECK_TEXT", "ARM_GREEDY_TOOL", "ARM_SYSROOT", "GreedyComparison", "GreedyRun",
    "arm_check_prompt", "arm_greedy_tool_path", "compare_greedy", "greedy_arm", "greedy_x86",
]

ARM_GREEDY_TOOL = "llama-greedy"  # the cross-built binary's name under $VENUS_EDGE_CACHE/arm-<version>/
ARM_SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's libc6-arm64-cross, for qemu-aarch64 -L
# Must match EXTRA_CONTEXT in scripts/llama_greedy.cpp: both builds use n_ctx = n_batch = n_ubatch = this + tokens.
EXTRA_CONTEXT = 8
# A plain English sentence: both models' tokenizers cut it into at least 32 tokens.
ARM_CHECK_TEXT = (
    "The history of the printing press begins in the fifteenth century, when movable metal type made books "
    "cheaper to copy than ever before, and within fifty years presses were running in more than two hundred "
    "cities across Europe."
)


@dataclass(frozen=True)
class GreedyRun:
    """One greedy decode: the chosen tokens and the logits that chose them.

    ``logits`` is (n_gen, n_vocab) float32: row i is the next-token distribution that chose ``tokens[i]``.
    Times are milliseconds of wall clock: ``prompt_ms`` for the prompt's batch, ``decode_ms`` for the
    n_gen - 1 single-token decodes after it.
    """

    build: str  # "x86" or "aarch64 (qemu)", with ", not repacked" when the weights kept the GGUF's layout
    tokens: tuple[int, ...]
    logits: np.ndarray
    prompt_ms: float
    decode_ms: float
    system_info: str
    repacked: bool | None  # llama.cpp put weights into its CPU_REPACK buffer at load (None: log not read)

    @property
    def decode_tokens_per_s(self) -> float:
        return (len(self.tokens) - 1) / (self.decode_ms / 1000.0) if self.decode_ms > 0 else float("inf")


@dataclass(frozen=True)
class GreedyComparison:
    """Two greedy runs on the same prompt, reference (x86) against candidate (ARM).

    ``kl[i]`` is KL(reference || candidate) in nats of the next-token distributions at position i, for every
    position where both had seen the same tokens: 0 .. first_difference (inclusive), or all of them when the
    tokens match. ``reference_margin`` is the reference's logit gap between its token and the candidate's token
    at the first difference: a small gap means a near tie that rounding flipped.
    """

    matching_tokens: int
    first_difference: int | None
    kl: tuple[float, ...]
    reference_margin: float | None

    @property
    def identical(self) -> bool:
        return self.first_difference is None

    @property
    def max_kl(self) -> float:
        return max(self.kl, default=0.0)

    @property
    def kl_at_difference(self) -> float | None:
        return None if self.first_difference is None else self.kl[self.first_difference]


def arm_greedy_tool_path(version: str | None = None) -> Path:
    """The cross-built ``llama-greedy`` for llama-cpp-python ``version`` (default: the installed one), built from
    that version's source package into ``$VENUS_EDGE_CACHE/arm-<version>``.

    Raises:
        ArmToolMissingError: the binary, qemu-aarch64 or the arm64 sysroot is missing.
    """
    version = version or importlib.metadata.version("llama-cpp-python")
    tool = cache_dir() / f"arm-{version}" / ARM_GREEDY_TOOL
    fix = "run bash scripts/setup.sh as root (or scripts/build_llama_arm.sh after apt-get install " \
          "gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user)"
    if shutil.which("qemu-aarch64") is None:
        raise ArmToolMissingError("qemu-aarch64", fix)
    if not ARM_SYSROOT.is_dir():
        raise ArmToolMissingError(f"{ARM_SYSROOT} (the arm64 sysroot)", fix)
    if not os.access(tool, os.X_OK):
        raise ArmToolMissingError(str(tool), fix)
    return tool


def arm_check_prompt(model_path: str | Path, n_tokens: int = 32, text: str = ARM_CHECK_TEXT) -> list[int]:
    """The first ``n_tokens`` token ids of ``text`` in the model's own tokenizer (x86 llama.cpp, BOS as the
    model's metadata says). Both builds then decode from these ids, so tokenization is not compared.

    Raises:
        ValueError: the text is shorter than ``n_tokens`` tokens in this vocabulary.
    """
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=64, vocab_only=True, verbose=False)
    try:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    finally:
        llm.close()
    if len(ids) < n_tokens:
        raise ValueError(f"{model_path}: the prompt text is {len(ids)} tokens; the check needs {n_tokens}")
    return list(ids[:n_tokens])


def greedy_x86(model_path: str | Path, prompt: Sequence[int], n_gen: int, *, n_threads: int = 1,
               repack: bool = True) -> GreedyRun:
    """Greedy decode of ``n_gen`` tokens after ``prompt`` with llama-cpp-python, the loop of llama_greedy.cpp:
    the prompt in one batch, then one token per decode; argmax with the lowest id winning ties. ``repack=False``
    keeps the weights in the GGUF's layout (`venus_edge.engines.llama_load.weights_not_repacked`)."""
    import contextlib

    import llama_cpp

    from venus_edge.engines.llama_cpp import off_main_thread
    from venus_edge.engines.llama_load import weights_not_repacked

    n_ctx = len(prompt) + n_gen + EXTRA_CONTEXT

    def decode() -> GreedyRun:
        with contextlib.nullcontext() if repack else weights_not_repacked():
            llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                                  n_threads=n_threads, n_threads_batch=n_threads, flash_attn=False, verbose=False)
        try:
            n_vocab = llm.n_vocab()
            rows = np.empty((n_gen, n_vocab), dtype=np.float32)  # (n_gen, vocab)
            batch_tokens = (llama_cpp.llama_token * len(prompt))(*prompt)
            batch = llama_cpp.llama_batch_get_one(batch_tokens, len(prompt))
            tokens: list[int] = []
            prompt_ms = 0.0
            started = time.perf_counter()
            for step in range(n_gen):
                if llama_cpp.llama_decode(llm.ctx, batch) != 0:
                    raise RuntimeError(f"{model_path}: llama_decode failed at step {step}")
                if step == 0:
                    prompt_ms = (time.perf_counter() - started) * 1000.0
                    started = time.perf_counter()
                rows[step] = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
                tokens.append(int(np.argmax(rows[step])))
                batch_tokens = (llama_cpp.llama_token * 1)(tokens[-1])
                batch = llama_cpp.llama_batch_get_one(batch_tokens, 1)
            decode_ms = (time.perf_counter() - started) * 1000.0
            system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
        finally:
            llm.close()
        build = "x86" if repack else "x86, not repacked"
        return GreedyRun(build, tuple(tokens), rows, prompt_ms, decode_ms, system_info, None)

    return off_main_thread(decode)


def greedy_arm(model_path: str | Path, prompt: Sequence[int], n_gen: int, *, n_threads: int = 1,
               repack: bool = True, tool: Path | None = None, qemu_cpu: str = "max",
               timeout_s: float = 3600.0) -> GreedyRun:
    """The same greedy decode by the cross-built ``llama-greedy`` under ``qemu-aarch64 -cpu {qemu_cpu}``
    (``max`` has NEON, dotprod, i8mm and SVE, so Q4_0 / Q8_0 / Q4_K take their repacked kernels; ``repack=False``
    keeps the GGUF's layout and the plain NEON kernels).

    Raises:
        ArmToolMissingError: nothing to run (see `arm_greedy_tool_path`).
        RuntimeError: the tool failed; the message holds the end of its log.
    """
    tool = tool or arm_greedy_tool_path()
    with tempfile.TemporaryDirectory(prefix="venus-arm-") as folder:
        logits_path = Path(folder) / "logits.f32"
        command = ["qemu-aarch64", "-cpu", qemu_cpu, "-L", str(ARM_SYSROOT), str(tool),
                   *([] if repack else ["--no-repack"]), str(model_path),
                   ",".join(str(token) for token in prompt), str(n_gen), str(logits_path), str(n_threads)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} on {model_path} exited {done.returncode}: {done.stderr[-2000:]}")
        result = json.loads(done.stdout)
        n_vocab = int(result["n_vocab"])
        logits = np.fromfile(logits_path, dtype=np.float32).reshape(n_gen, n_vocab)  # (n_gen, vocab)
    build = "aarch64 (qemu)" if repack else "aarch64 (qemu), not repacked"
    return GreedyRun(build, tuple(int(t) for t in result["tokens"]), logits, float(result["prompt_ms"]),
                     float(result["decode_ms"]), str(result["system_info"]), _repacked(done.stderr.splitlines()))


def _repacked(log_lines: Sequence[str]) -> bool:
    """Whether llama.cpp's load log names a CPU_REPACK model buffer (weights repacked for the CPU's kernels)."""
    return any("CPU_REPACK model buffer size" in line for line in log_lines)


def compare_greedy(reference: GreedyRun, candidate: GreedyRun) -> GreedyComparison:
    """Tokens and next-token distributions of two greedy runs of the same prompt (see `GreedyComparison`).

    Raises:
        ValueError: the runs have different lengths or vocabularies.
    """
    if reference.logits.shape != candidate.logits.shape:
        raise ValueError(f"runs differ in shape: {reference.logits.shape} vs {candidate.logits.shape}")
    first_difference = next(
        (i for i, (a, b) in enumerate(zip(reference.tokens, candidate.tokens, strict=True)) if a != b), None)
    shared = len(reference.tokens) if first_difference is None else first_difference + 1
    kl = _kl_per_position(reference.logits[:shared], candidate.logits[:shared])  # (shared,)
    margin = None
    if first_difference is not None:
        row = reference.logits[first_difference]
        margin = float(row[reference.tokens[first_difference]] - row[candidate.tokens[first_difference]])
    matching = len(reference.tokens) if first_difference is None else first_difference
    return GreedyComparison(matching, first_difference, tuple(float(x) for x in kl), margin)
