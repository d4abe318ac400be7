#!/usr/bin/python3
# Reads the RESULT lines bench/pipeline/run.sh collected and prints medians and ratios as markdown
# tables (docs/benchmarks/pipeline.md). Usage: summary.py results.txt [cores]
import re
import statistics
import sys

SCHEDULES = ("gpipe", "1f1b", "interleaved")
NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B (v=2)"}


def load(path):
    rows = {}
    for line in open(path):
        fields = dict(re.findall(r"(\w+)=([\w./-]+)", line))
        rows.setdefault((fields["impl"], fields["schedule"], int(fields["ranks"])), []).append(fields)
    return rows


def median(rows, key, field):
    values = [float(r[field]) for r in rows.get(key, []) if field in r]
    return statistics.median(values) if values else float("nan")


def per_rank(rows, key, field, fmt):
    """The median of each rank's value, as 'r0/r1/...' ('-' when not measured)."""
    lists = [[float(v) for v in r[field].split("/")] for r in rows.get(key, []) if field in r]
    if not lists:
        return "-"
    return "/".join(fmt % statistics.median(col) for col in zip(*lists))


def throughput_table(rows, cores):
    one_c, one_t = median(rows, ("cohort", "single", 1), "samples_per_s"), median(rows, ("torch", "single", 1), "samples_per_s")
    print(f"One process, whole batch: cohort (LibTorch C++) {one_c:.0f} samples/s, torch (Python) {one_t:.0f} samples/s.\n")
    print("| ranks | schedule | cohort samples/s | cohort / one process | torch samples/s | torch / one process | cohort / torch |")
    print("|---|---|---|---|---|---|---|")
    for ranks in (2, 4):
        for s in SCHEDULES:
            c, t = median(rows, ("cohort", s, ranks), "samples_per_s"), median(rows, ("torch", s, ranks), "samples_per_s")
            note = " (oversubscribed)" if ranks > cores else ""
            print(f"| {ranks}{note} | {NAMES[s]} | {c:.0f} | {c / one_c:.2f} | {t:.0f} | {t / one_t:.2f} | {c / t:.2f} |")


def bubble_table(rows):
    print("\n| ranks | schedule | formula | cohort bubble (mean) | cohort per rank | torch bubble (mean) | torch per rank |")
    print("|---|---|---|---|---|---|---|")
    for ranks in (2, 4):
        for s in SCHEDULES:
            c, t = ("cohort", s, ranks), ("torch", s, ranks)
            print(f"| {ranks} | {NAMES[s]} | {median(rows, c, 'bubble_formula'):.3f} | {median(rows, c, 'bubble'):.3f} | "
                  f"{per_rank(rows, c, 'bubble_ranks', '%.2f')} | {median(rows, t, 'bubble'):.3f} | "
                  f"{per_rank(rows, t, 'bubble_ranks', '%.2f')} |")
    c, t = (median(rows, (impl, "single", 1), "bubble") for impl in ("cohort", "torch"))
    print(f"\nThe same measure in one process (no bubble there: what the clock misses): cohort {c:.3f}, torch {t:.3f}.")


def memory_table(rows):
    print("\n| ranks | schedule | cohort peak RSS MB per rank | cohort added MB | activations held (peak, per rank) | torch peak RSS MB | torch added MB |")
    print("|---|---|---|---|---|---|---|")
    for ranks, schedules in ((1, ("single",)), (2, SCHEDULES), (4, SCHEDULES)):
        for s in schedules:
            c, t = ("cohort", s, ranks), ("torch", s, ranks)
            print(f"| {ranks} | {NAMES.get(s, 'one process')} | {per_rank(rows, c, 'rss_mb', '%.0f')} | "
                  f"{per_rank(rows, c, 'rss_added_mb', '%.0f')} | {per_rank(rows, c, 'activations', '%.0f')} | "
                  f"{per_rank(rows, t, 'rss_mb', '%.0f')} | {per_rank(rows, t, 'rss_added_mb', '%.0f')} |")


def cohort2_table(rows):
    if not any(k[0] == "cohort2" for k in rows):
        return
    print("\n| ranks | schedule | cohort (LibTorch 2.x build) samples/s | torch samples/s | cohort 2.x / torch |")
    print("|---|---|---|---|---|")
    for ranks in (2, 4):
        for s in SCHEDULES:
            c, t = median(rows, ("cohort2", s, ranks), "samples_per_s"), median(rows, ("torch", s, ranks), "samples_per_s")
            print(f"| {ranks} | {NAMES[s]} | {c:.0f} | {t:.0f} | {c / t:.2f} |")


def main():
    rows = load(sys.argv[1])
    cores = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    throughput_table(rows, cores)
    bubble_table(rows)
    memory_table(rows)
    cohort2_table(rows)
    runs = len(rows.get(("cohort", "1f1b", 2), []))
    print(f"\n(medians of {runs} interleaved runs each)")


if __name__ == "__main__":
    main()
