"""Our converter against llama.cpp's reference converter on the same tiny Qwen3 checkpoint.

Run: ``.venv/bin/python benchmarks/compare_converter.py [--out-type f16] [--hidden-size 256 --layers 2]
[--source-dtype bfloat16]``; ``benchmarks/bench_converter_rss.py`` runs it on two larger checkpoints.

Builds the checkpoint, extracts ``vendor/llama.cpp/convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/``
from the llama-cpp-python source package into a temporary folder (never into the repository), runs both
converters in subprocesses, and compares the two files: tensor names, types, shapes and bytes; token list,
token types and merges; other metadata keys. Each converter runs under a small wrapper process whose
``resource.getrusage(RUSAGE_CHILDREN)`` gives the converter's peak RSS (a fresh wrapper, because Linux carries a
process's peak over fork + exec, and this process has held the whole checkpoint); wall time is measured around it.

The reference converter needs torch, transformers and sentencepiece (it imports sentencepiece before it
looks for a sentencepiece model). Exit code 0 when the files are identical in all compared parts, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import gguf
import numpy as np

from venus_edge.quantize.gguf_info import GGUFHeader, read_gguf_header
from venus_edge.quantize.tiny import Qwen3Config, write_tiny_qwen3

DEFAULT_SDIST = Path.home() / ".cache/venus-edge/sdist/llama_cpp_python-0.3.36.tar.gz"
_VENDOR = "vendor/llama.cpp/"
_EXTRACT = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")

# Runs argv[1:] as a child, then prints {"wall_s", "peak_rss_bytes", "rc"} of that child as JSON.
_WRAPPER = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=sys.stderr)
wall_s = time.perf_counter() - started
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
print(json.dumps({"rc": rc, "wall_s": wall_s, "peak_rss_bytes": peak_kib * 1024}))
"""

_OURS = (
    "import sys; from venus_edge.quantize.convert import convert_checkpoint; "
    "convert_checkpoint(sys.argv[1], sys.argv[2], out_type=sys.argv[3])"
)


def extract_reference(sdist: Path, into: Path) -> Path:
    """Extract the reference converter and gguf-py from the sdist; returns the llama.cpp folder."""
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            _, _, inner = member.name.partition("/")
            if inner.startswith(_VENDOR) and inner[len(_VENDOR):].startswith(_EXTRACT):
                member.name = inner
                members.append(member)
        archive.extractall(into, members=members, filter="data")
    return into / _VENDOR


def run_measured(argv: list[str], env: dict[str, str] | None = None) -> dict:
    """Wall time and peak RSS of one command run in a child of a wrapper process."""
    result = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True, text=True, env=env,
                            check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise RuntimeError(f"wrapper failed: {result.stderr[-2000:]}")
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    if measured["rc"] != 0:
        raise RuntimeError(f"{argv[:3]} exited {measured['rc']}: {result.stderr[-3000:]}")
    return measured


def _tensor_bytes(header: GGUFHeader) -> dict[str, bytes]:
    data = np.memmap(header.path, dtype=np.uint8, mode="r")
    return {
        t.name: data[header.data_offset + t.offset : header.data_offset + t.offset + t.n_bytes].tobytes()
        for t in header.tensors
    }


def compare_files(ours: Path, reference: Path) -> dict:
    """The differences between two GGUF files, part by part (empty lists / True mean identical)."""
    a, b = read_gguf_header(ours), read_gguf_header(reference)
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    common = sorted(set(ta) & set(tb))
    bytes_a, bytes_b = _tensor_bytes(a), _tensor_bytes(b)
    tok = gguf.Keys.Tokenizer
    same = lambda key: _equal(a.metadata.get(key), b.metadata.get(key))  # noqa: E731
    metadata_diff = sorted(
        key for key in set(a.metadata) | set(b.metadata)
        if key not in (tok.LIST, tok.TOKEN_TYPE, tok.MERGES) and not same(key)
    )
    return {
        "tensors_only_ours": sorted(set(ta) - set(tb)),
        "tensors_only_reference": sorted(set(tb) - set(ta)),
        "tensor_order_same": [t.name for t in a.tensors] == [t.name for t in b.tensors],
        "type_diff": [n for n in common if ta[n].ggml_type != tb[n].ggml_type],
        "shape_diff": [n for n in common if ta[n].shape != tb[n].shape],
        "bytes_diff": [n for n in common if bytes_a[n] != bytes_b[n]],
        "token_list_same": same(tok.LIST),
        "token_types_same": same(tok.TOKEN_TYPE),
        "merges_same": same(tok.MERGES),
        "n_tokens": len(a.metadata.get(tok.LIST, [])),
        "n_merges": len(a.metadata.get(tok.MERGES, [])),
        "metadata_diff": {key: [_show(a.metadata.get(key)), _show(b.metadata.get(key))] for key in metadata_diff},
        "size_bytes": [a.file_size_bytes, b.file_size_bytes],
    }


def _equal(x, y) -> bool:
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return x is not None and y is not None and np.array_equal(np.asarray(x), np.asarray(y))
    return x == y


def _show(value):
    if isinstance(value, (list, tuple, np.ndarray)):
        return f"<array of {len(value)}>"
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


def identical(diff: dict) -> bool:
    """True when tensors (names, types, shapes, bytes) and the vocabulary (tokens, types, merges) match."""
    tensor_keys = ("tensors_only_ours", "tensors_only_reference", "type_diff", "shape_diff", "bytes_diff")
    return not any(diff[k] for k in tensor_keys) \
        and diff["token_list_same"] and diff["token_types_same"] and diff["merges_same"]


def compare(config: Qwen3Config, out_type: str, *, sdist: Path = DEFAULT_SDIST, source_dtype: str = "float32",
            workdir: Path | None = None) -> dict:
    """Write the checkpoint, run both converters on it, and compare their files.

    Args:
        config: the checkpoint's shape (random weights, seed 0, real Qwen tokenizer).
        out_type: "f32", "f16" or "bf16".
        sdist: the llama-cpp-python source package holding the reference converter.
        source_dtype: the checkpoint's dtype, "float32", "float16" or "bfloat16".
        workdir: folder for the checkpoint and both outputs (a temporary folder, removed after, when None).
    Returns:
        {"checkpoint", "source_dtype", "out_type", "ours", "reference" (each {"wall_s", "peak_rss_bytes", "rc"}),
        "wall_ratio", "peak_rss_ratio" (ours / reference), "identical", "diff" (see `compare_files`)}.
    """
    with tempfile.TemporaryDirectory(prefix="compare-converter-", dir=workdir) as tmp:
        tmp = Path(tmp)
        checkpoint = write_tiny_qwen3(tmp / "checkpoint", config=config, seed=0, dtype=source_dtype)
        llama_dir = extract_reference(sdist, tmp / "ref")
        python_path = os.pathsep.join([str(llama_dir / "gguf-py"), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": python_path}
        reference_out, ours_out = tmp / "reference.gguf", tmp / "ours.gguf"
        reference = run_measured([sys.executable, str(llama_dir / "convert_hf_to_gguf.py"), "--outtype", out_type,
                                  "--outfile", str(reference_out), str(checkpoint)], env=env)
        ours = run_measured([sys.executable, "-c", _OURS, str(checkpoint), str(ours_out), out_type])
        diff = compare_files(ours_out, reference_out)
    return {
        "checkpoint": dataclasses.asdict(config), "source_dtype": source_dtype, "out_type": out_type,
        "ours": ours, "reference": reference,
        "wall_ratio": ours["wall_s"] / reference["wall_s"],
        "peak_rss_ratio": ours["peak_rss_bytes"] / reference["peak_rss_bytes"],
        "identical": identical(diff), "diff": diff,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, default=DEFAULT_SDIST, help="llama-cpp-python source package (.tar.gz)")
    parser.add_argument("--out-type", default="f16", choices=["f32", "f16", "bf16"])
    parser.add_argument("--source-dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--intermediate-size", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    args = parser.parse_args(argv)
    if not args.sdist.is_file():
        parser.error(f"{args.sdist} not found; fetch it with: pip download --no-deps --no-binary :all: "
                     f"llama-cpp-python==0.3.36")
    config = dataclasses.replace(Qwen3Config.tiny(), hidden_size=args.hidden_size,
                                 intermediate_size=args.intermediate_size, num_hidden_layers=args.layers)
    result = compare(config, args.out_type, sdist=args.sdist, source_dtype=args.source_dtype)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print_summary(result)
    return 0 if result["identical"] else 1


def print_summary(result: dict) -> None:
    """The comparison in a dozen lines: what differs, wall times and peak RSS."""
    diff, ours, reference = result["diff"], result["ours"], result["reference"]
    print(f"checkpoint: vocab {result['checkpoint']['vocab_size']:,}, hidden {result['checkpoint']['hidden_size']}, "
          f"{result['checkpoint']['num_hidden_layers']} layers, {result['source_dtype']} -> {result['out_type']}")
    print(f"identical tensors and vocabulary: {result['identical']}")
    for key in ("tensors_only_ours", "tensors_only_reference", "type_diff", "shape_diff", "bytes_diff"):
        print(f"  {key}: {diff[key] or 'none'}")
    print(f"  tensor order same: {diff['tensor_order_same']}")
    print(f"  token list same: {diff['token_list_same']} ({diff['n_tokens']:,} tokens), token types same: "
          f"{diff['token_types_same']}, merges same: {diff['merges_same']} ({diff['n_merges']:,})")
    print(f"  other metadata that differs: {json.dumps(diff['metadata_diff']) if diff['metadata_diff'] else 'none'}")
    print(f"  file sizes: ours {diff['size_bytes'][0]:,} B, reference {diff['size_bytes'][1]:,} B")
    print(f"wall time: ours {ours['wall_s']:.2f} s, reference {reference['wall_s']:.2f} s, ratio "
          f"{result['wall_ratio']:.2f}")
    print(
        f"peak RSS: ours {ours['peak_rss_bytes'] / 2**20:.0f} MiB, reference {reference['peak_rss_bytes'] / 2**20:.0f} "
        f"MiB, "
        f"ratio {result['peak_rss_ratio']:.2f}"
    )


if __name__ == "__main__":
    sys.exit(main())
