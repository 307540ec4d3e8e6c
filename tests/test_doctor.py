"""``venus-edge doctor`` (``venus_edge.memory.diagnose``): what a device is and what to run on it, read from fake
/proc and /sys trees of an x86 laptop and an 8-core big.LITTLE phone, from broken trees (a directory where a file
should be, garbage in a file, missing cpufreq and thermal folders: each an 'unknown' with the path and why, the rest
still reported), and from this machine, where the features must agree with llama.cpp's own system info."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from venus_edge.cli import main
from venus_edge.memory import (
    CPU_FEATURES,
    diagnose,
    dr_venus_4b_header,
    header_at_quant,
    llama_backends,
    llama_features_of,
    llama_system_info,
    performance_cores,
    plan_memory,
    read_model_header,
)

GiB = 1 << 30
HELPER_N_CTX = 8_192
X86_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
             "syscall nx lm constant_tsc pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c "
             "rdrand hypervisor lahf_lm abm bmi1 avx2 bmi2 erms")
ARM_FEATURES = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc "
                "dcpop sha3 sm3 sm4 asimddp sha512 asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp flagm2 "
                "frint i8mm bf16 bti")
ARM_LLAMA_INFO = ("CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | MATMUL_INT8 = 1 | DOTPROD = 1 | OPENMP = 1 | "
                  "REPACK = 1 | OpenCL : ADRENO = 1 | ")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _meminfo(root: Path, total_kib: int, available_kib: int) -> None:
    _write(root / "proc/meminfo", f"MemTotal:       {total_kib} kB\nMemFree:         123456 kB\n"
                                  f"MemAvailable:   {available_kib} kB\nBuffers:          1024 kB\n")


def _cpu(root: Path, cpu: int, *, max_freq_khz: int | None, siblings: str) -> None:
    folder = root / f"sys/devices/system/cpu/cpu{cpu}"
    _write(folder / "topology/thread_siblings_list", f"{siblings}\n")
    if max_freq_khz is not None:
        _write(folder / "cpufreq/cpuinfo_max_freq", f"{max_freq_khz}\n")


def x86_laptop(root: Path) -> Path:
    """4 cores, 8 threads (SMT pairs 0,4 1,5 ...), one speed, AVX2 without AVX-512, 16 GiB with 11 GiB available."""
    blocks = [f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Core(TM) i7-8565U\n"
              f"core id\t\t: {cpu % 4}\nflags\t\t: {X86_FLAGS}\n" for cpu in range(8)]
    _write(root / "proc/cpuinfo", "\n".join(blocks))
    for cpu in range(8):
        _cpu(root, cpu, max_freq_khz=4_600_000, siblings=f"{cpu % 4},{cpu % 4 + 4}")
    _meminfo(root, 16 * 1024 * 1024, 11 * 1024 * 1024)
    _write(root / "sys/class/thermal/thermal_zone0/type", "x86_pkg_temp\n")
    _write(root / "sys/class/thermal/thermal_zone0/temp", "52000\n")
    return root


#: The phone's clusters: CPUs 0-3 little at 2.0 GHz, 4-5 big at 2.8 GHz, 6-7 prime at 3.2 GHz.
PHONE_FREQS_KHZ = [2_016_000] * 4 + [2_803_200] * 2 + [3_187_200] * 2


def arm_phone(root: Path) -> Path:
    """An 8-core big.LITTLE phone (4 little + 2 big + 2 prime), asimddp and i8mm without SVE, 8 GiB with 3.5 GiB
    available."""
    blocks = [f"processor\t: {cpu}\nBogoMIPS\t: 38.40\nFeatures\t: {ARM_FEATURES}\nCPU implementer\t: 0x41\n"
              f"CPU architecture: 8\nCPU part\t: 0xd4{cpu % 3}\n" for cpu in range(8)]
    _write(root / "proc/cpuinfo", "\n".join(blocks) + "\nHardware\t: Qualcomm Technologies, Inc SM8550\n")
    for cpu, freq in enumerate(PHONE_FREQS_KHZ):
        _cpu(root, cpu, max_freq_khz=freq, siblings=str(cpu))
    _meminfo(root, 7_700_000, int(3.5 * 1024 * 1024))
    for zone, (kind, milli) in enumerate([("cpu-0-0", 41200), ("cpu-1-0", 44800), ("battery", 31000)]):
        _write(root / f"sys/class/thermal/thermal_zone{zone}/type", kind + "\n")
        _write(root / f"sys/class/thermal/thermal_zone{zone}/temp", f"{milli}\n")
    return root


def _expected_plan(quant: str, available_bytes: int, threads: int, features: frozenset[str]):
    return plan_memory(header_at_quant(dr_venus_4b_header("F16"), quant), ram_bytes=available_bytes,
                       n_threads=threads, helper_n_ctx=HELPER_N_CTX, cpu_features=features)


def test_x86_laptop(tmp_path):
    """Features from the flags, SMT siblings once, RAM, the thermal zone, and the planner's recommendation."""
    report = diagnose(x86_laptop(tmp_path), header=dr_venus_4b_header("F16"), helper_n_ctx=HELPER_N_CTX,
                      llama_info="CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | REPACK = 1 | ")
    assert (report.architecture, report.cpu_name, report.logical_cpus) == ("x86_64", "Intel(R) Core(TM) i7-8565U", 8)
    has = {name for name, present in report.cpu_features.items() if present}
    assert has == {"AVX", "AVX2", "FMA", "F16C"}, report.cpu_features
    assert report.cpu_features["AVX512"] is False and report.cpu_features["AVX_VNNI"] is False
    assert (report.cores("performance"), report.cores("efficiency")) == (4, 0), report.core_groups
    assert (report.ram_total_bytes, report.ram_available_bytes) == (16 * GiB, 11 * GiB)
    assert report.thermal_c == {"x86_pkg_temp": 52.0}
    assert report.llama_backends == ("CPU",) and report.unused_features == ()  # a fake tree is not this machine
    rec = report.recommendation
    assert rec is not None and rec.plan is not None and rec.n_threads == 4
    expected = _expected_plan(rec.quant or "", 11 * GiB, 4, frozenset(has))
    assert rec.quant == "Q8_0" and rec.plan == expected and rec.plan.n_ctx >= 16_384, rec
    assert report.unknown == (), report.unknown


def test_big_little_phone(tmp_path):
    """The slowest cluster is the efficiency cores and threads go to the other four; ARM features from ``Features``;
    Q4_0 (what an ARM build repacks) when Q8_0's weights do not fit beside a window."""
    report = diagnose(arm_phone(tmp_path), header=dr_venus_4b_header("F16"), helper_n_ctx=HELPER_N_CTX,
                      llama_info=ARM_LLAMA_INFO)
    assert report.architecture == "aarch64" and report.cpu_name == "Qualcomm Technologies, Inc SM8550"
    assert report.cpu_features == {"NEON": True, "FP16_VA": True, "DOTPROD": True, "MATMUL_INT8": True,
                                   "SVE": False, "SME": False}
    groups = [(g.kind, g.cpus, g.cores, g.max_freq_khz) for g in report.core_groups]
    assert groups == [("performance", (6, 7), 2, 3_187_200), ("performance", (4, 5), 2, 2_803_200),
                      ("efficiency", (0, 1, 2, 3), 4, 2_016_000)]
    assert (report.cores("performance"), report.cores("efficiency")) == (4, 4)
    assert report.ram_available_bytes == int(3.5 * GiB) and report.ram_total_bytes == 7_700_000 * 1024
    assert report.thermal_c == {"cpu-0-0": 41.2, "cpu-1-0": 44.8, "battery": 31.0}
    assert report.llama_backends == ("CPU", "OpenCL")
    rec = report.recommendation
    assert rec is not None and rec.plan is not None
    features = frozenset({"NEON", "FP16_VA", "DOTPROD", "MATMUL_INT8"})
    assert rec.quant == "Q4_0" and rec.n_threads == 4, rec
    assert rec.plan == _expected_plan("Q4_0", int(3.5 * GiB), 4, features)
    with pytest.raises(Exception, match="needs"):  # Q8_0 would not have fit: the choice is the planner's
        _expected_plan("Q8_0", int(3.5 * GiB), 4, features)
    text = report.render()
    assert "4 performance (2 at 3.19 GHz + 2 at 2.80 GHz), 4 efficiency (4 at 2.02 GHz)" in text, text
    assert f"run DR-Venus-4B: Q4_0, 4 threads, n_ctx {rec.plan.n_ctx:,}, KV cache {rec.plan.kv_type}" in text, text


def _x86_desktop(root: Path, freqs_khz: list[int], *, smt: bool) -> Path:
    """An x86 desktop whose CPUs run at ``freqs_khz`` (SMT pairs n, n + cores when ``smt``)."""
    cores = len(freqs_khz)
    cpus = [(cpu, freq, f"{cpu},{cpu + cores}" if smt else str(cpu)) for cpu, freq in enumerate(freqs_khz)]
    if smt:
        cpus += [(cpu + cores, freq, f"{cpu},{cpu + cores}") for cpu, freq in enumerate(freqs_khz)]
    _write(root / "proc/cpuinfo", "\n".join(f"processor\t: {cpu}\nflags\t\t: {X86_FLAGS}\n" for cpu, _, _ in cpus))
    for cpu, freq, siblings in cpus:
        _cpu(root, cpu, max_freq_khz=freq, siblings=siblings)
    return root


def test_favoured_cores_are_not_efficiency_cores(tmp_path):
    """A desktop whose two favoured cores boost 4 % higher (Intel Turbo Boost Max 3.0; AMD preferred cores under
    amd-pstate give each core its own maximum): every core is a performance core and llama.cpp gets all eight."""
    itbm = _x86_desktop(tmp_path / "itbm", [5_000_000] * 2 + [4_800_000] * 6, smt=True)
    report = diagnose(itbm)
    assert (report.cores("performance"), report.cores("efficiency")) == (8, 0), report.core_groups
    assert performance_cores(itbm) == 8
    amd = _x86_desktop(tmp_path / "amd", [5_760_000, 5_740_000, 5_660_000, 5_610_000, 5_580_000, 5_530_000], smt=True)
    assert (diagnose(amd).cores("performance"), performance_cores(amd)) == (6, 6)


def test_hybrid_x86_and_phone_threads_go_to_the_performance_cores(tmp_path):
    """An Intel hybrid laptop (4 P-cores with SMT at 4.7 GHz, 8 E-cores at 3.5 GHz: 0.74 of the P-cores' clock) and the
    big.LITTLE phone: ``performance_cores``, which ``physical_cores`` and so every engine's default threads read,
    counts the fast cores once each, and only those this process may run on."""
    hybrid = _x86_desktop(tmp_path / "hybrid", [4_700_000] * 4 + [3_500_000] * 8, smt=False)
    for cpu in range(4):  # the P-cores' hyper-threads, CPUs 12-15
        _cpu(hybrid, 12 + cpu, max_freq_khz=4_700_000, siblings=f"{cpu},{12 + cpu}")
        _write(hybrid / f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", f"{cpu},{12 + cpu}\n")
    report = diagnose(hybrid)
    assert (report.cores("performance"), report.cores("efficiency")) == (4, 8), report.core_groups
    assert performance_cores(hybrid) == 4
    phone = arm_phone(tmp_path / "phone")
    assert performance_cores(phone) == 4
    assert performance_cores(phone, allowed={0, 1, 6, 7}) == 2  # pinned to two little and two prime cores
    assert performance_cores(phone, allowed={0, 1}) is None
    assert performance_cores(tmp_path / "nothing") is None


def test_unreadable_files_are_unknown_and_the_rest_is_reported(tmp_path):
    """A directory where /proc/meminfo should be, garbage in one cpuinfo_max_freq, no thermal tree: each fact is
    'unknown' with its path and why; the CPU, its features and the cores are still reported."""
    root = arm_phone(tmp_path)
    (root / "proc/meminfo").unlink()
    (root / "proc/meminfo").mkdir()
    _write(root / "sys/devices/system/cpu/cpu5/cpufreq/cpuinfo_max_freq", "\x00\x13garbage\n")
    shutil.rmtree(root / "sys/class/thermal")
    report = diagnose(root, header=dr_venus_4b_header("F16"), llama_info=ARM_LLAMA_INFO)
    unknown = "\n".join(report.unknown)
    assert f"RAM: {root}/proc/meminfo is a directory, not a file" in unknown, unknown
    assert f"{root}/sys/devices/system/cpu/cpu5/cpufreq/cpuinfo_max_freq holds " in unknown, unknown
    assert "not a whole number" in unknown and f"no thermal zones ({root}/sys/class/thermal is missing)" in unknown
    assert "the recommendation: the RAM available is unknown" in unknown
    assert report.ram_total_bytes is None and report.recommendation is None and report.thermal_c == {}
    assert report.cpu_features["DOTPROD"] and report.architecture == "aarch64"
    assert report.cores("efficiency") == 4 and report.cores("performance") == 4  # cpu5 kept, among the fast ones
    text = report.render()
    assert "RAM          unknown total, unknown available" in text and "unknown:\n  - " in text


def test_a_tree_without_cpufreq_counts_every_core(tmp_path):
    """No cpufreq (a VM, a locked-down phone): core speeds unknown, every core a performance core, said so."""
    root = x86_laptop(tmp_path)
    for folder in (root / "sys/devices/system/cpu").glob("cpu*/cpufreq"):
        shutil.rmtree(folder)
    report = diagnose(root)
    assert report.cores("performance") == 4 and report.cores("efficiency") == 0
    assert any("core speeds:" in reason and "cpuinfo_max_freq is missing" in reason
               and "all counted as performance cores" in reason for reason in report.unknown), report.unknown
    assert "llama-cpp-python is not installed" in "\n".join(report.unknown)  # no llama_info given


def test_garbage_cpuinfo_and_an_empty_root(tmp_path):
    """A /proc/cpuinfo of garbage, and a root with nothing in it: unknowns, never an exception."""
    _write(tmp_path / "garbage/proc/cpuinfo", "\x7fELF\x02\x01 not a cpuinfo at all\n")
    report = diagnose(tmp_path / "garbage")
    assert report.architecture is None and report.cpu_features == {}
    assert any("lists no 'flags' (x86) or 'Features' (ARM) line" in reason for reason in report.unknown)
    (tmp_path / "empty").mkdir()
    report = diagnose(tmp_path / "empty", header=dr_venus_4b_header("F16"))
    assert report.core_groups == () and report.recommendation is None
    assert len(report.unknown) >= 4, report.unknown
    json.dumps(report.to_dict())


def test_doctor_command_json_on_a_fake_phone_with_a_real_gguf(tmp_path, smollm2_gguf, capsys):
    """``venus-edge doctor --root DIR --model FILE --json``: the JSON parses and holds the tree's facts and a
    recommendation from the file's header (no weights loaded)."""
    root = arm_phone(tmp_path)
    assert main(["doctor", "--root", str(root), "--model", str(smollm2_gguf), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["architecture"] == "aarch64" and payload["cpu_features"]["MATMUL_INT8"] is True
    assert (payload["performance_cores"], payload["efficiency_cores"]) == (4, 4)
    rec = payload["recommendation"]
    header = read_model_header(smollm2_gguf)
    assert rec["quant"] == "Q8_0" and rec["n_threads"] == 4 and rec["n_ctx"] == header.n_ctx_train, rec
    assert rec["plan"]["weights_bytes"] == header_at_quant(header, "Q8_0").weight_bytes


def test_doctor_command_refuses_a_root_that_is_not_a_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as usage:
        main(["doctor", "--root", str(tmp_path / "nowhere")])
    assert usage.value.code == 2 and "not a directory" in capsys.readouterr().err


def test_this_machine_agrees_with_llama_cpp():
    """On this machine, every CPU feature llama.cpp's build uses is one the CPU reports; the ones the CPU has and the
    build does not use are listed as unused; x86 machines report AVX2 or AVX-512 as llama.cpp does."""
    info = llama_system_info()
    report = diagnose("/", llama_info=info)
    assert report.llama_system_info == info and "CPU" in llama_backends(info)
    uses = llama_features_of(info)
    family = "x86" if report.architecture in ("x86_64", "x86") else "arm"
    mapped = CPU_FEATURES[family]
    for feature in mapped:
        if feature in uses:
            assert report.cpu_features[feature], f"llama.cpp uses {feature}; doctor says the CPU lacks it"
    has = {feature for feature, present in report.cpu_features.items() if present}
    assert set(report.unused_features) == has - uses
    if family == "x86":
        assert report.cpu_features["AVX2"] == ("AVX2" in uses) or "AVX2" in report.unused_features
        assert report.cpu_features["AVX2"] or report.cpu_features["AVX512"]
    text = report.render()
    assert info.strip() in text
