"""Peak RSS of our converter against llama.cpp's ``convert_hf_to_gguf.py`` on two checkpoint sizes.

Each size is a Qwen3 checkpoint with the real 151,936-entry vocabulary, the attention and FFN widths of a real
Qwen3 model (16 query heads and 8 KV heads of 128, FFN 3x hidden) and ``--layers`` layers, so the embedding
(vocab x hidden) is the largest tensor, as in Qwen3-4B; weights are random BF16 (``--source-dtype``), the
output F16 (``--out-type``). Both converters run on the same checkpoint through ``compare_converter.compare``
(peak RSS = ``ru_maxrss`` of the converter's process; tensors, types, shapes and vocabulary compared byte for
byte).

    .venv/bin/python benchmarks/bench_converter_rss.py             # hidden 1024 and 2048: a table
    .venv/bin/python benchmarks/bench_converter_rss.py --hidden 2560 --layers 1 --json

Needs ~2.5 GB of free disk in ``--workdir`` (default: the system temporary folder) for hidden 2048, and the
reference's torch/transformers/sentencepiece. About 2 minutes on 2 cores. Exit code 0 when every size gives
identical tensors and vocabulary and a peak RSS ratio (ours / reference) of at most ``--max-ratio``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_converter import DEFAULT_SDIST, compare

from venus_edge.quantize.tiny import Qwen3Config

DEFAULT_HIDDEN = (1024, 2048)  # the widths of Qwen3-0.6B and Qwen3-1.7B: embeddings of 155.6M and 311.2M parameters


def checkpoint_config(hidden_size: int, layers: int) -> Qwen3Config:
    """Qwen3 vocabulary and rope; `hidden_size` wide with 16 x 128 query heads, 8 KV heads, FFN 3 x hidden."""
    return dataclasses.replace(
        Qwen3Config.tiny(), hidden_size=hidden_size, intermediate_size=3 * hidden_size, num_hidden_layers=layers,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=list(DEFAULT_HIDDEN), help="hidden sizes to run")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--source-dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--out-type", default="f16", choices=["f32", "f16", "bf16"])
    parser.add_argument("--max-ratio", type=float, default=0.25, help="the peak RSS ratio (ours / reference) to meet")
    parser.add_argument("--sdist", type=Path, default=DEFAULT_SDIST, help="llama-cpp-python source package (.tar.gz)")
    parser.add_argument("--workdir", type=Path, default=None, help="folder for the checkpoints and outputs")
    parser.add_argument("--json", action="store_true", help="print the full results as JSON")
    args = parser.parse_args(argv)
    if not args.sdist.is_file():
        parser.error(
            f"{args.sdist} not found; fetch it with: pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36"
        )
    results = []
    for hidden in args.hidden:
        config = checkpoint_config(hidden, args.layers)
        result = compare(config, args.out_type, sdist=args.sdist, source_dtype=args.source_dtype, workdir=args.workdir)
        result["embedding_f32_bytes"] = config.vocab_size * hidden * 4
        results.append(result)
        if not args.json:
            _print_row(result, header=len(results) == 1)
    if args.json:
        print(json.dumps(results, indent=2, default=str))
    ok = all(r["identical"] and r["peak_rss_ratio"] <= args.max_ratio for r in results)
    if not args.json:
        print(f"all identical and peak RSS ratio <= {args.max_ratio}: {ok}")
    return 0 if ok else 1


def _print_row(result: dict, *, header: bool) -> None:
    mib = lambda n: f"{n / 2**20:,.0f}"  # noqa: E731
    if header:
        print(
            f"{result['source_dtype']} -> {result['out_type']}, vocab {result['checkpoint']['vocab_size']:,}, "
            f"{result['checkpoint']['num_hidden_layers']} layers"
        )
        print(
            "| hidden | embedding F32 MiB | file MiB | ours peak RSS MiB | reference peak RSS MiB | RSS ratio "
            "| ours wall s | reference wall s | identical |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    ours, reference = result["ours"], result["reference"]
    print(
        f"| {result['checkpoint']['hidden_size']} | {mib(result['embedding_f32_bytes'])} | "
        f"{mib(result['diff']['size_bytes'][0])} | {mib(ours['peak_rss_bytes'])} | {mib(reference['peak_rss_bytes'])} "
        f"| "
        f"{result['peak_rss_ratio']:.2f} | {ours['wall_s']:.1f} | {reference['wall_s']:.1f} | "
        f"{'yes' if result['identical'] else 'NO'} |",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
