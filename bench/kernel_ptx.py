"""What Triton makes of the decode attention kernel for a GPU, without one: PTX instruction counts.

    python bench/kernel_ptx.py --out DIR [--arch 90] [--shape qwen7b] [--stages 2]

Compiles `decode_attention._decode_kernel` ahead of time for the given compute capability (Triton's
bundled ptxas; no driver needed) over a tape in the model dtype (bf16) and an FP8 tape, and counts
the instructions that say how the K/V bytes travel: global loads and async copies, shared-memory
loads by width (`ld.shared.b8` is a byte at a time), ldmatrix, the conversions and the MMAs. Static
counts of the kernel's code, not of its execution: a loop body counts once. A way to see a kernel's
data path on a machine with no GPU (bench/NOTES.md 2026-12-06: the FP8 tape's codes read a byte at
a time, which two kernels without it showed was not what limits it); the timing is `bench/kv_fp8.py`'s. Writes DIR/kernel_ptx.json, .png and each DIR/decode_<tape>.ptx.

It compiles the kernel of the `worker` that Python imports. In a checkout set up by scripts/setup.sh
that is the checkout's own (the editable install comes before PYTHONPATH): to read another revision's
PTX, put its file in the checkout.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import inspect
import json
import re
import sys
import time
from pathlib import Path

from worker.model.decode_attention import DEFAULT_CONFIG

SHAPES = {"smollm2": (3, 64), "qwen7b": (7, 128)}  # query heads per KV head, head size
_POINTERS = ("q_ptr", "k_ptr", "v_ptr", "o_ptr", "starts_ptr", "used_ptr", "head_starts_ptr", "head_lens_ptr")
_INSTRUCTION = re.compile(r"\b((?:ld|st|cp\.async|cvt|mma|wgmma|ldmatrix)\.[\w:.]+)")


def decode_ptx(fp8: bool, group: int, head_dim: int, arch: int, config) -> str:
    """The decode kernel's PTX for `arch` (e.g. 90) with `config`'s launch choices (a DecodeConfig),
    pointers and multiple-of-16 strides specialised as a launch on real tapes specialises them."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from worker.model.decode_attention import _decode_kernel, group_rows

    tape = "*u8" if fp8 else "*bf16"
    types = {"q_ptr": "*bf16", "k_ptr": tape, "v_ptr": tape, "o_ptr": "*bf16", "scale_log2": "fp32"}
    constants = {"GROUP": group, "GROUP_PAD": group_rows(group), "HEAD_DIM": head_dim,
                 "BLOCK_N": config.block_n, "FP8": fp8}
    names = list(inspect.signature(_decode_kernel.fn).parameters)
    signature = {n: "constexpr" if n in constants else types.get(n, "*i32" if n in _POINTERS else "i32")
                 for n in names}
    aligned = [i for i, n in enumerate(names) if n in _POINTERS or n.startswith("stride_") or n == "scale_offset"]
    source = ASTSource(_decode_kernel, signature, constants, {(i,): [["tt.divisibility", 16]] for i in aligned})
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": config.num_warps, "num_stages": config.num_stages})
    return compiled.asm["ptx"]


def counts(ptx: str) -> dict[str, int]:
    """Instruction mnemonic -> occurrences in the code (data movement, conversions, MMAs only)."""
    found = collections.Counter(m.group(1) for m in _INSTRUCTION.finditer(ptx) if not m.group(1).startswith("ld.param"))
    return dict(found.most_common())


def chart(res: dict, path: Path) -> None:
    """The instructions that differ between the tapes, side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tapes = res["tapes"]
    names = sorted({n for t in tapes.values() for n in t["instructions"]},
                   key=lambda n: -max(t["instructions"].get(n, 0) for t in tapes.values()))[:14]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for offset, (tape, found) in enumerate(tapes.items()):
        ys = [i + (offset - 0.5) * 0.4 for i in range(len(names))]
        ax.barh(ys, [found["instructions"].get(n, 0) for n in names], height=0.4, label=tape)
    ax.set_yticks(range(len(names)), names, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("occurrences in the kernel's PTX (static)")
    ax.set_title(f"decode kernel, sm_{res['arch']}, {res['shape']} shape, {res['stages']} stages, {res['date']}",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10: 90 = H100/H200")
    ap.add_argument("--shape", default="qwen7b", choices=sorted(SHAPES))
    ap.add_argument("--stages", type=int, help="pipeline stages (default: the kernel's own, DecodeConfig)")
    args = ap.parse_args(argv)
    config = dataclasses.replace(DEFAULT_CONFIG, num_stages=args.stages or DEFAULT_CONFIG.num_stages)
    args.out.mkdir(parents=True, exist_ok=True)
    group, head_dim = SHAPES[args.shape]
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "arch": args.arch, "shape": args.shape,
           "stages": config.num_stages, "config": vars(config), "command": "python bench/kernel_ptx.py " + " ".join(argv or sys.argv[1:]),
           "tapes": {}}
    for tape in ("bf16", "fp8"):
        ptx = decode_ptx(tape == "fp8", group, head_dim, args.arch, config)
        (args.out / f"decode_{tape}.ptx").write_text(ptx)
        res["tapes"][tape] = {"lines": len(ptx.splitlines()), "instructions": counts(ptx)}
        print(tape, json.dumps(res["tapes"][tape]), flush=True)
    (args.out / "kernel_ptx.json").write_text(json.dumps(res, indent=1))
    chart(res, args.out / "kernel_ptx.png")
    return res


if __name__ == "__main__":
    main()
