"""The ARM check: our GGUFs (Q4_0, Q8_0, Q4_K_M of the tiny Qwen3 and of SmolLM2) load in an aarch64 build of
llama.cpp under qemu and decode greedily like the x86 wheel, 32 tokens after a 32-token prompt.

Skipped with the reason when the cross-built tool, qemu-aarch64 or the arm64 sysroot is missing
(`scripts/setup.sh` as root installs and builds them; `scripts/build_llama_arm.sh` builds).

Where the tokens differ, the difference must be the kernels' arithmetic, not a broken file: both builds saw the
same tokens up to that position, so their next-token distributions there must agree to within KL_BOUNDS nats.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from venus_edge.quantize.arm_check import (
    GreedyRun,
    arm_check_prompt,
    arm_greedy_tool_path,
    compare_greedy,
    greedy_arm,
    greedy_x86,
)
from venus_edge.quantize.errors import ArmToolMissingError
from venus_edge.quantize.gguf_info import ggml_type_name, read_gguf_header
from venus_edge.quantize.quantize import quantize_gguf
from venus_edge.testing import smollm2_path

try:
    ARM_TOOL: Path | None = arm_greedy_tool_path()
    MISSING = ""
except ArmToolMissingError as error:
    ARM_TOOL, MISSING = None, str(error)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(ARM_TOOL is None, reason=f"no ARM check here: {MISSING}")]

QTYPES = ("Q4_0", "Q8_0", "Q4_K_M")
PROMPT_TOKENS = 32
GENERATED_TOKENS = 32
# KL(x86 || ARM) bounds per model, in nats, over the positions where both builds saw the same tokens.
# Both builds compute the same quantized dot products; what differs is arithmetic: x86 quantizes activations to
# int8 with 127/amax and ARM with 1/(amax/127) (ggml-cpu arch/x86 and arch/arm quants.c), so a value at a rounding
# boundary lands one step apart, and the repacked i8mm kernels sum in another order. A 30-layer real model
# amplifies that: SmolLM2 measured 0.014-0.034 (Q4_K_M's first difference, at generated token 2, comes from the
# plain kernels: the ARM build without repacking flips there too), and on x86 alone the same Q4_0 file in
# llama.cpp's repacked and plain layouts differs by 0.024. What the bound must catch is a broken kernel or a
# mis-repacked tensor, which is at least a requantization's worth: SmolLM2 Q8_0 -> Q4_K_M is 0.06 mean and 0.39 at
# its worst position, -> Q4_0 0.29 and 0.80. The tiny Qwen3's random weights give flat distributions, so
# everything is smaller there: ARM vs x86 below 1e-5, F16 -> Q4_0 2.5e-3.
KL_BOUNDS = {"tiny-qwen3": 1e-3, "smollm2": 0.1}
# The ggml types whose tensors llama.cpp repacks on NEON with dotprod/i8mm (ggml-cpu repack.cpp).
REPACKED_TYPES = {"Q4_0", "Q8_0", "Q4_K"}


def _requantize(source: Path, target: Path, qtype: str) -> None:
    """SmolLM2 ships only as Q4_1; the check needs the three types of one set of weights, so it requantizes
    (quantize_gguf rightly refuses a quantized source; here both builds load the same file, which is all that
    matters)."""
    import llama_cpp

    from venus_edge.quantize.quantize import QUANT_TYPES

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_{QUANT_TYPES[qtype].ftype_name}")
    params.allow_requantize = True
    params.nthread = 1
    assert llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params) == 0


@pytest.fixture(scope="module")
def arm_models(tmp_path_factory: pytest.TempPathFactory, tiny_gguf_f16: Path) -> dict[tuple[str, str], Path]:
    """(model, qtype) -> GGUF: the tiny Qwen3 quantized from its F16 master, SmolLM2 requantized from Q4_1."""
    folder = tmp_path_factory.mktemp("arm-models")
    smollm2 = folder / "smollm2-q4_1.gguf"
    shutil.copy(smollm2_path(), smollm2)
    models = {}
    for qtype in QTYPES:
        models["tiny-qwen3", qtype] = folder / f"tiny-qwen3-{qtype.lower()}.gguf"
        quantize_gguf(tiny_gguf_f16, models["tiny-qwen3", qtype], qtype, n_threads=1)
        models["smollm2", qtype] = folder / f"smollm2-{qtype.lower()}.gguf"
        _requantize(smollm2, models["smollm2", qtype], qtype)
    return models


def _describe(model: str, qtype: str, x86: GreedyRun, x86_plain: GreedyRun, arm: GreedyRun) -> str:
    comparison = compare_greedy(x86, arm)
    verdict = "identical" if comparison.identical else (
        f"first difference at generated token {comparison.first_difference} (x86's logit margin "
        f"{comparison.reference_margin:.3f}, KL there {comparison.kl_at_difference:.2e})")
    return (f"{model} {qtype}: {comparison.matching_tokens}/{len(x86.tokens)} tokens {verdict}; max KL(x86 || ARM) "
            f"{comparison.max_kl:.2e} nats; x86 repacked vs plain layout {compare_greedy(x86, x86_plain).max_kl:.2e}; "
            f"qemu decode {arm.decode_tokens_per_s:.2f} tok/s (not a phone's speed), x86 {x86.decode_tokens_per_s:.1f}")


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("model", ["tiny-qwen3", "smollm2"])
def test_arm_greedy_matches_x86(arm_models: dict[tuple[str, str], Path], model: str, qtype: str) -> None:
    path = arm_models[model, qtype]
    prompt = arm_check_prompt(path, PROMPT_TOKENS)
    x86 = greedy_x86(path, prompt, GENERATED_TOKENS)
    x86_plain = greedy_x86(path, prompt, GENERATED_TOKENS, repack=False)  # x86's own arithmetic variation
    arm = greedy_arm(path, prompt, GENERATED_TOKENS, tool=ARM_TOOL)
    description = _describe(model, qtype, x86, x86_plain, arm)
    print(description)

    # The ARM build has the features a recent phone core has, and repacked the weights for them.
    for feature in ("NEON = 1", "DOTPROD = 1", "MATMUL_INT8 = 1", "REPACK = 1"):
        assert feature in arm.system_info, arm.system_info
    weight_types = {ggml_type_name(tensor.ggml_type) for tensor in read_gguf_header(path).tensors}
    assert arm.repacked == bool(weight_types & REPACKED_TYPES), (weight_types, arm.repacked)

    comparison = compare_greedy(x86, arm)
    assert comparison.max_kl <= KL_BOUNDS[model], description
    if not comparison.identical:
        # A near tie flipped by the arithmetic: ARM's token is one of x86's top three there, and x86 preferred its
        # own by less than the largest logit difference between the builds at that position.
        step = comparison.first_difference
        assert step is not None and comparison.reference_margin is not None
        x86_top3 = np.argsort(-x86.logits[step])[:3]
        assert arm.tokens[step] in x86_top3, description
        assert comparison.reference_margin <= np.abs(x86.logits[step] - arm.logits[step]).max(), description
