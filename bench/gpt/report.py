#!/usr/bin/env python3
# Medians of bench/gpt/run.sh's RESULT lines as a markdown table: peak resident memory per rank (and
# above the process's own start, which differs between a C++ binary and a Python interpreter), the
# formula, samples/s and the ratios the issue asks for.
import re
import statistics
import sys


def formula_mib(mode, params, ranks, n_layer, n_embd):
    """Model state per rank by the ZeRO paper's count (fp32 AdamW: 4 B weights + 4 B grads + 8 B
    moments) plus, for stage 3 / FSDP2, two whole blocks gathered at once (the running one and the
    prefetched one). Activations are left out: at 2 x 64 tokens they are a few MiB."""
    block = 12 * n_embd * n_embd + 13 * n_embd
    if "zero3" in mode or "fsdp" in mode:
        state = 16 * params / ranks + 2 * 4 * block
    elif "zero2" in mode:
        state = 4 * params + 12 * params / ranks
    elif "zero1" in mode:
        state = 8 * params + 8 * params / ranks
    else:
        state = 16 * params
    return state / 2**20


def main(path):
    rows = {}
    for line in open(path):
        f = dict(re.findall(r"(\w+)=([\w.+]+)", line))
        rows.setdefault((int(f["ranks"]), f["mode"]), []).append(f)

    def med(key, field):
        return statistics.median(float(r[field]) for r in rows[key])

    print("| ranks | mode | peak MiB/rank | above start | formula | above start / formula | samples/s |"
          " vs cohort ddp | vs torch fsdp2 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ranks in sorted({k[0] for k in rows}):
        modes = sorted(m for (r, m) in rows if r == ranks)
        fsdp2 = next((m for m in modes if m.endswith("fsdp2")), None)
        for mode in modes:
            key = (ranks, mode)
            first = rows[key][0]
            peak, start = med(key, "peak_max_mib"), med(key, "rss_start_mib")
            formula = formula_mib(mode, int(first["params"]), ranks, int(first["n_layer"]), int(first["n_embd"]))
            s = med(key, "samples_per_s")
            vs_ddp = s / med((ranks, "ddp"), "samples_per_s") if (ranks, "ddp") in rows else float("nan")
            vs_fsdp2 = s / med((ranks, fsdp2), "samples_per_s") if fsdp2 else float("nan")
            print(f"| {ranks} | {mode} | {peak:.0f} | {peak - start:.0f} | {formula:.0f} | "
                  f"{(peak - start) / formula:.2f} | {s:.3f} | {vs_ddp:.2f} | {vs_fsdp2:.2f} |")
    any_row = next(iter(rows.values()))[0]
    print(f"\n(medians of {len(next(iter(rows.values())))} interleaved runs; GPT n_layer={any_row['n_layer']} "
          f"n_embd={any_row['n_embd']}, {int(any_row['params']) / 1e6:.1f}M parameters)")


if __name__ == "__main__":
    main(sys.argv[1])
