#!/usr/bin/env python3
# bench/hosts/run.sh's tables: reads its results file (one "AR ..." line per size per allreduce run, one
# "DDP ..." line per DDP run, key=value fields) and prints markdown for docs/BENCHMARKS.md, per link
# rate: allreduce medians and the ratios to Open MPI that issue 26 asks of cohort, DDP samples/s and the
# ratios to PyTorch 2.11, with HOOKS beyond none the step time each hook saves, and the GPT's fsdp step
# flat against HSDP (samples/s and bytes between hosts). Ratios are medians of
# per-repetition ratios (runs of one repetition ran next to each other).
# Usage: tables.py RESULTS REPS [RANKS_PER_HOST [HOST_CPUS]]
import re
import statistics
import sys
from collections import defaultdict

PER_HOST = sys.argv[3] if len(sys.argv) > 3 else "2"
# How the hosts' ranks share the machine's CPUs (run.sh's HOST_CPUS), for the tables' titles.
CPUS = ", each host on its own CPUs" if len(sys.argv) > 4 and sys.argv[4] == "split" else ""
NAMES = {"cohort": "cohort", "cohort_flat": "cohort flat (COHORT_HIERARCHICAL=0)", "gloo_raw": "raw c10d Gloo (flat)",
         "mpi": "Open MPI", "torch": "PyTorch 2.11 DDP (Gloo)"}


def size_name(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"


def read(path):
    rows = []
    for line in open(path):
        kind, _, rest = line.partition(" ")
        fields = dict(re.findall(r"(\w+)=([\w.+-]+)", rest))
        fields["kind"] = kind
        rows.append(fields)
    return rows


def med(values):
    values = list(values)
    return statistics.median(values) if values else None


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def ratio(by_rep, a, b):
    """Median over repetitions of a's value / b's value (by_rep: rep -> impl -> value)."""
    return med(v[a] / v[b] for v in by_rep.values() if a in v and b in v and v[b] > 0)


def target(size, r):
    """Issue 26's bar for cohort against Open MPI: at most its time from 64 KiB up, within 1.5x below."""
    if r is None:
        return "—"
    bar = 1.0 if size >= 64 << 10 else 1.5
    return f"{'yes' if r <= bar else 'no'} (<= {bar})"


def allreduce_table(rows, rate):
    per = defaultdict(lambda: defaultdict(dict))  # bytes -> rep -> impl -> us
    for r in rows:
        if r["kind"] == "AR" and r["rate"] == rate:
            per[int(r["bytes"])][r["rep"]][r["impl"]] = float(r["us"])
    if not per:
        return
    impls = [i for i in ("cohort", "cohort_flat", "gloo_raw", "mpi") if any(i in v for s in per.values() for v in s.values())]
    head = [f"{NAMES[i]} us" for i in impls]
    ratios = [("cohort", "mpi"), ("cohort_flat", "mpi"), ("cohort", "cohort_flat")]
    ratios = [(a, b) for a, b in ratios if a in impls and b in impls]
    head += [f"{NAMES[a].split(' (')[0]} / {NAMES[b].split(' (')[0]}" for a, b in ratios]
    show_target = ("cohort", "mpi") in ratios
    print(f"\nAllreduce, 2 hosts x {PER_HOST} ranks{CPUS}, link {'unshaped (veth)' if rate == 'none' else 'tbf ' + rate}: "
          "float32 sum, per call, rank 0's clock\n")
    print("| size | " + " | ".join(head) + (" | cohort meets issue 26's bar |" if show_target else " |"))
    print("|---" * (len(head) + 1 + show_target) + "|")
    for size in sorted(per):
        cells = [fmt(med(v[i] for v in per[size].values() if i in v), ".1f") for i in impls]
        cells += [fmt(ratio(per[size], a, b), ".2f") for a, b in ratios]
        if show_target:
            cells.append(target(size, ratio(per[size], "cohort", "mpi")))
        print(f"| {size_name(size)} | " + " | ".join(cells) + " |")


def ddp_table(rows, rate):
    per = defaultdict(lambda: defaultdict(dict))  # (model, hook) -> rep -> impl -> row
    for r in rows:
        if r["kind"] == "DDP" and r["rate"] == rate:
            per[(r["model"], r["hook"])][r["rep"]][r["impl"]] = r
    if not per:
        return
    impls = [i for i in ("cohort", "cohort_flat", "torch") if any(i in v for k in per.values() for v in k.values())]

    def value(key, impl, field):
        return med(float(v[impl][field]) for v in per[key].values() if impl in v and field in v[impl])

    def per_rep(key, field):
        return {rep: {i: float(r[field]) for i, r in v.items() if field in r} for rep, v in per[key].items()}

    ratios = [(a, "torch") for a in ("cohort", "cohort_flat") if a in impls and "torch" in impls]
    head = [f"{NAMES[i]} samples/s" for i in impls] + [f"{NAMES[a].split(' (')[0]} / PyTorch" for a, _ in ratios]
    head += [f"{NAMES[i].split(' (')[0]} step ms" for i in impls]
    head += [f"{NAMES[i].split(' (')[0]} bucket wait ms" for i in impls if i != "torch"]
    print(f"\nDDP step, 2 hosts x {PER_HOST} ranks{CPUS}, link {'unshaped (veth)' if rate == 'none' else 'tbf ' + rate}: "
          "synthetic data, samples/s over all ranks\n")
    print("| model | batch per rank | hook | " + " | ".join(head) + " |")
    print("|---" * (len(head) + 3) + "|")
    for key in sorted(per):
        cells = [fmt(value(key, i, "samples_per_s"), ".1f") for i in impls]
        cells += [fmt(ratio(per_rep(key, "samples_per_s"), a, b), ".2f") for a, b in ratios]
        cells += [fmt(value(key, i, "step_ms"), ".1f") for i in impls]
        cells += [fmt(value(key, i, "wait_ms"), ".1f") for i in impls if i != "torch"]
        batch = next(r["batch"] for v in per[key].values() for r in v.values())
        print(f"| {key[0]} | {batch} | {key[1]} | " + " | ".join(cells) + " |")
    hook_table(per, impls)


def hook_table(per, impls):
    """For each hook beyond none: the step time without it, with it, and the share saved."""
    hooked = sorted(k for k in per if k[1] != "none" and (k[0], "none") in per)
    if not hooked:
        return
    print("\n| model | hook | implementation | step ms without | step ms with | step time saved |")
    print("|---|---|---|---|---|---|")
    for model, hook in hooked:
        for impl in impls:
            plain = med(float(v[impl]["step_ms"]) for v in per[(model, "none")].values() if impl in v)
            with_hook = med(float(v[impl]["step_ms"]) for v in per[(model, hook)].values() if impl in v)
            saved = None if plain is None or with_hook is None else 1 - with_hook / plain
            print(f"| {model} | {hook} | {NAMES[impl]} | {fmt(plain, '.1f')} | {fmt(with_hook, '.1f')} | "
                  f"{fmt(saved, '.0%')} |")


def hsdp_table(rows, rate):
    """The GPT's fsdp step sharded over all ranks (flat) against HSDP (a host's ranks shard, the hosts
    replicate): samples/s, and the bytes the hosts sent each other per step (every host's, summed)."""
    per = defaultdict(dict)  # rep -> impl -> row
    for r in rows:
        if r["kind"] == "HSDP" and r["rate"] == rate:
            per[r["rep"]][r["impl"]] = r
    if not per:
        return

    def value(impl, field):
        return med(float(v[impl][field]) for v in per.values() if impl in v)

    def per_rep(field):
        return {rep: {i: float(r[field]) for i, r in v.items()} for rep, v in per.items()}

    first = next(r for v in per.values() for r in v.values())
    print(f"\nGPT fsdp step, 2 hosts x {PER_HOST} ranks{CPUS}, link {'unshaped (veth)' if rate == 'none' else 'tbf ' + rate}: "
          f"{first['params']} parameters, samples/s over all ranks, MiB the hosts sent per step\n")
    print("| implementation | samples/s | step s | MiB between hosts per step |")
    print("|---|---|---|---|")
    for impl, name in (("flat", "fsdp over all ranks (hierarchical collectives)"),
                       ("flat_ring", "fsdp over all ranks, flat ring (COHORT_HIERARCHICAL=0)"),
                       ("hsdp", "HSDP (shard within a host)")):
        print(f"| {name} | {fmt(value(impl, 'samples_per_s'), '.2f')} | {fmt(value(impl, 'step_s'), '.3f')} | "
              f"{fmt(value(impl, 'sent_mib_per_step'), '.1f')} |")
    for base in ("flat", "flat_ring"):
        print(f"\nHSDP / {base} samples/s: {fmt(ratio(per_rep('samples_per_s'), 'hsdp', base), '.2f')}; "
              f"{base} / HSDP bytes between hosts: {fmt(ratio(per_rep('sent_mib_per_step'), base, 'hsdp'), '.2f')}")


def main():
    rows = read(sys.argv[1])
    rates = list(dict.fromkeys(r["rate"] for r in rows))
    for rate in rates:
        allreduce_table(rows, rate)
        ddp_table(rows, rate)
        hsdp_table(rows, rate)
    runs = len({(r["rate"], r["rep"]) for r in rows})
    print(f"\n(medians over {sys.argv[2]} repetitions, the implementations taking turns in an order rotated each "
          f"repetition; ratios: medians of the per-repetition ratios; {runs} rate x repetition passes had results)")


if __name__ == "__main__":
    main()
