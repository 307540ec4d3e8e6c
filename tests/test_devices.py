"""Phone and laptop presets (``venus_edge.memory.devices``): the planner's check that the weights stay resident
(a plan that would page them from flash is refused, naming what fits, and what it names does fit), the tables
against the planner itself, the README's tables, ``venus-edge plan --device``, and the preset models against a real
file."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from venus_edge.cli import main
from venus_edge.errors import MemoryPlanError
from venus_edge.memory import (
    DEVICE_PRESETS,
    HEADROOM_FRACTION,
    TABLE_MODELS,
    device_plans_table,
    device_preset,
    device_presets_table,
    plan_memory,
    plan_on_device,
    preset_model_header,
    read_model_header,
)

README = Path(__file__).resolve().parents[1] / "README.md"
HELPER_N_CTX = 8_192  # visit's helper context, as research loads it (DEFAULT_HELPER_N_CTX)


def test_presets_keep_a_share_that_falls_as_ram_grows():
    """Each preset leaves an app less than its RAM, more on a larger device, and a falling share to the system."""
    for kind in ("phone", "laptop"):
        devices = [d for d in DEVICE_PRESETS.values() if d.kind == kind]
        assert [d.ram_bytes for d in devices] == sorted(d.ram_bytes for d in devices)
        for smaller, larger in itertools.pairwise(devices):
            assert 0 < smaller.app_bytes < larger.app_bytes < larger.ram_bytes
            assert smaller.kept_bytes / smaller.ram_bytes > larger.kept_bytes / larger.ram_bytes
        assert all(d.source for d in devices)
    assert device_preset("Phone-8GB") is DEVICE_PRESETS["phone-8gb"]
    with pytest.raises(ValueError, match=r"no device preset 'phone-7gb'; did you mean phone-8gb\? the presets are "):
        device_preset("phone-7gb")


def test_a_plan_on_a_device_keeps_everything_resident():
    """Every plan ``plan_on_device`` returns fits in the app's budget less the headroom; one whose weights alone
    exceed it is refused (DR-Venus-4B Q8_0, 4.0 GiB of weights, on an 8 GB phone's 4.0 GiB)."""
    for device in DEVICE_PRESETS.values():
        for name, quant in TABLE_MODELS:
            try:
                plan = plan_on_device(preset_model_header(name, quant), device, helper_n_ctx=HELPER_N_CTX)
            except MemoryPlanError:
                continue
            assert plan.total_bytes <= device.app_bytes * (1 - HEADROOM_FRACTION), (device.name, name, quant)
    phone = device_preset("phone-8gb")
    with pytest.raises(MemoryPlanError, match="does not stay resident on phone-8gb") as caught:
        plan_on_device(preset_model_header("DR-Venus-4B", "Q8_0"), phone, helper_n_ctx=HELPER_N_CTX)
    assert caught.value.usable_bytes == int(phone.app_bytes * (1 - HEADROOM_FRACTION)) < caught.value.needed_bytes


def _named_fixes(message: str) -> tuple[str | None, list[tuple[str, str]], str | None]:
    """(the smaller quant, [(model, quant)], the larger device) that a refusal names as fitting."""
    fits = message.split("What fits: ", 1)[1]
    quant = re.search(r"a (\w+) of this model", fits)
    models = re.findall(r"(DR-Venus-4B|Qwen3-1\.7B|Qwen3-0\.6B|SmolLM2-135M) (Q\w+) \(", fits)
    device = re.search(r"--device (\S+)", fits)
    return quant and quant.group(1), models, device and device.group(1)


@pytest.mark.parametrize(("quant", "device_name"), [("Q4_0", "phone-4gb"), ("Q4_K_M", "phone-6gb"),
                                                    ("Q8_0", "phone-8gb")])
def test_refusals_name_what_fits_and_it_does(quant, device_name):
    """The refusal says the weights would be read back from flash and names a smaller quant, a smaller model and a
    larger device; each of them plans on that device (or the larger one) without a refusal."""
    header = preset_model_header("DR-Venus-4B", quant)
    device = device_preset(device_name)
    with pytest.raises(MemoryPlanError) as caught:
        plan_on_device(header, device, helper_n_ctx=HELPER_N_CTX)
    message = str(caught.value)
    assert message.startswith(f"DR-Venus-4B {quant} does not stay resident on {device_name}: it needs ")
    assert "llama.cpp would read the weights back from flash at every token" in message, message
    smaller_quant, models, larger = _named_fixes(message)
    assert models and larger, message
    if smaller_quant:
        plan_on_device(preset_model_header("DR-Venus-4B", smaller_quant), device, helper_n_ctx=HELPER_N_CTX)
    for model, model_quant in models:
        plan_on_device(preset_model_header(model, model_quant), device, helper_n_ctx=HELPER_N_CTX)
    plan_on_device(header, device_preset(larger), helper_n_ctx=HELPER_N_CTX)


def test_device_plans_table_is_the_planners():
    """Each cell of the table is what ``plan_memory`` chooses for the app's budget (window and KV type), or
    "pages" exactly where it refuses: the table is computed, not written down."""
    table = device_plans_table()
    lines = table.splitlines()
    devices = [cell.strip() for cell in lines[0].strip("|").split("|")[1:]]
    assert devices == [name for name, d in DEVICE_PRESETS.items() if d.kind == "phone"]
    for line, (name, quant) in zip(lines[2:], TABLE_MODELS, strict=True):
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[0].startswith(f"{name} {quant} ("), cells[0]
        for device_name, cell in zip(devices, cells[1:], strict=True):
            model = preset_model_header(name, quant)
            budget = DEVICE_PRESETS[device_name].app_bytes
            try:
                plan = plan_memory(model, ram_bytes=budget, n_threads=1, helper_n_ctx=HELPER_N_CTX,
                                   cpu_features=frozenset())
            except MemoryPlanError as error:
                assert cell.startswith("pages (needs "), (name, quant, device_name, cell, str(error))
                continue
            assert cell.startswith(f"{plan.n_ctx // 1024}K {plan.kv_type}"), (name, quant, device_name, cell)
    assert "pages" in table and "32K" in table  # some of both: the presets span the models


def test_readme_holds_the_device_tables():
    """README's phone tables are generated by ``device_presets_table`` and ``device_plans_table``; regenerate them
    when the planner or the presets change."""
    text = README.read_text()
    assert device_presets_table() in text
    assert device_plans_table() in text


def test_preset_smollm2_is_the_real_file(smollm2_gguf):
    """The SmolLM2-135M preset has the dimensions and parameter count of the test model's GGUF header."""
    real = read_model_header(smollm2_gguf)
    preset = preset_model_header("SmolLM2-135M", "Q8_0")
    for key in ("architecture", "n_layer", "n_head", "n_head_kv", "n_embd", "head_dim_k", "head_dim_v", "n_ff",
                "n_vocab", "n_ctx_train", "n_params"):
        assert getattr(preset, key) == getattr(real, key), key


def test_plan_command_on_phone_4gb_refuses_to_page_and_names_what_fits(capsys):
    """``venus-edge plan DR-Venus-4B:Q4_K_M --device phone-4gb`` exits 3 naming what fits; the device it names
    plans the same model (exit 0)."""
    assert main(["plan", "DR-Venus-4B:Q4_K_M", "--device", "phone-4gb"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: DR-Venus-4B Q4_K_M does not stay resident on phone-4gb"), err
    assert "read the weights back from flash" in err and "What fits: " in err
    _, models, larger = _named_fixes(err)
    assert models and larger
    assert main(["plan", f"{models[0][0]}:{models[0][1]}", "--device", "phone-4gb"]) == 0
    assert main(["plan", "DR-Venus-4B:Q4_K_M", "--device", larger]) == 0
    assert f"{larger}: " in capsys.readouterr().out


def test_plan_command_device_json_and_usage_errors(smollm2_gguf, capsys):
    """A real GGUF on a phone preset: JSON with the device and its budget; unknown names and --device with --ram are
    usage errors (exit 2)."""
    assert main(["plan", str(smollm2_gguf), "--device", "phone-4gb", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    phone = DEVICE_PRESETS["phone-4gb"]
    assert payload["device"]["name"] == "phone-4gb" and payload["ram_bytes"] == phone.app_bytes
    assert payload["fits"] and payload["usable_bytes"] == int(phone.app_bytes * (1 - HEADROOM_FRACTION))
    for argv, message in ((["--device", "phone4gb"], "did you mean phone-4gb"),
                          (["--device", "phone-4gb", "--ram", "4G"], "--device and --ram exclude each other")):
        with pytest.raises(SystemExit) as usage:
            main(["plan", str(smollm2_gguf), *argv])
        assert usage.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["plan", "DR-Venus-4B:Q5", "--device", "phone-8gb"])
    assert usage.value.code == 2 and "the types Q8_0, Q6_K" in capsys.readouterr().err
