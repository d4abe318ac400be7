#!/usr/bin/env python3
"""The figures of docs/BENCHMARKS.md, drawn from the CSVs beside them in docs/img/ (each row copied from
a table of a page in docs/benchmarks/, with its date and command). Writes docs/img/<name>.png for each
CSV it knows. Needs matplotlib: scripts/install-docs.sh puts it in ~/.cache/cohort/mkdocs, so
    ~/.cache/cohort/mkdocs/bin/python bench/plots.py
(The scaling study's figure, docs/img/scaling.png, is bench/scaling/run.sh's, drawn with gnuplot.)"""
import csv
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

IMG = pathlib.Path(__file__).resolve().parent.parent / "docs" / "img"


def rows(name):
    with open(IMG / f"{name}.csv", newline="") as f:
        return list(csv.DictReader(f))


def size_label(n):
    n = int(n)
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def save(fig, name):
    fig.tight_layout()
    fig.savefig(IMG / f"{name}.png", dpi=100)
    plt.close(fig)
    print(f"plots: {IMG / (name + '.png')}")


def ratio_by_size(name, panels, title, note):
    """cohort's time over Open MPI's per message size, one line per series of a panel."""
    data = rows(name)
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), sharey=True, squeeze=False)
    for ax, (panel_title, series) in zip(axes[0], panels):
        for label, keep in series:
            sel = [r for r in data if keep(r)]
            xs = [int(r["size_bytes"]) for r in sel]
            ax.plot(xs, [float(r["cohort_us"]) / float(r["openmpi_us"]) for r in sel], marker="o", label=label)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [size_label(x) for x in xs], rotation=45)
        ax.set_title(panel_title)
        ax.set_xlabel("message size")
        ax.grid(True, alpha=0.3)
        ax.legend()
    axes[0][0].set_ylabel("cohort / Open MPI, medians' ratio (below 1: cohort faster)")
    fig.suptitle(f"{title}\n{note}", fontsize=10)
    return fig


def allreduce_openmpi():
    panels = [(proc, [(f"ranks bound: {b}", lambda r, p=proc, b=b: r["processor"] == p and r["ranks_bound"] == b)
                      for b in ("no", "yes")])
              for proc in ("AMD EPYC (2 vCPU)", "Intel Xeon (16 cores)")]
    save(ratio_by_size("allreduce_openmpi", panels, "allreduce, float32 sum, 2 ranks on one host",
                       "bench/allreduce_run.sh, 2026-11-26 (docs/benchmarks/collectives.md)"), "allreduce_openmpi")


def hosts_allreduce_openmpi():
    panels = [("2 hosts x 2 ranks, each host on its own CPU",
               [(link, lambda r, l=link: r["link"] == l) for link in ("unshaped (veth)", "1 Gbit/s (tbf)")])]
    save(ratio_by_size("hosts_allreduce_openmpi", panels, "allreduce across hosts (network namespaces)",
                       "bench/hosts/run.sh 3, 2026-11-27 08:15 (docs/benchmarks/hosts.md)"), "hosts_allreduce_openmpi")


def ddp_pytorch():
    data = rows("ddp_pytorch")
    models = list(dict.fromkeys(r["model"] for r in data))
    impls = list(dict.fromkeys(r["implementation"] for r in data))
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(impls)
    for i, impl in enumerate(impls):
        xs, ys = [], []
        for m, model in enumerate(models):
            anchor = [r for r in data if r["model"] == model and r["implementation"] == "PyTorch 2.11 DDP"]
            mine = [r for r in data if r["model"] == model and r["implementation"] == impl]
            if anchor and mine:
                xs.append(m + (i - (len(impls) - 1) / 2) * width)
                ys.append(float(mine[0]["samples_per_s"]) / float(anchor[0]["samples_per_s"]))
        ax.bar(xs, ys, width, label=impl)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("samples/s relative to PyTorch 2.11 DDP")
    ax.set_title("DDP on 2 ranks, one host, CPU: cnn and mlp bench/ddp/run.sh 3 30 (2026-11-23, loaded);\n"
                 "resnet18 and vit bench/scaling/run.sh 3 10 32 (2026-11-24, quiet) (docs/benchmarks/ddp.md, scaling.md)",
                 fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "ddp_pytorch")


def gpt_memory_fsdp2():
    data = rows("gpt_memory_fsdp2")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for impl, style in (("cohort fsdp", "o-"), ("PyTorch 2.11 FSDP2", "s-")):
        sel = [r for r in data if r["implementation"] == impl]
        ax.plot([float(r["params_millions"]) for r in sel], [float(r["peak_mib_per_rank"]) for r in sel], style,
                label=f"{impl}: the same model")
        big = [r for r in data if r["implementation"].startswith(impl + " (largest")]
        for r in big:
            ax.plot(float(r["params_millions"]), float(r["peak_mib_per_rank"]), style[0], markersize=11,
                    fillstyle="none", color=ax.lines[-1].get_color(), label=f"{impl}: the largest that trained in 16 GiB")
    ax.set_xlabel("GPT parameters (millions)")
    ax.set_ylabel("peak memory per rank (MiB, largest rank)")
    ax.set_title("GPT, fp32 AdamW, 4 ranks on the CPU: cohort's stage 3 (fsdp) against FSDP2\n"
                 "bench/gpt/run.sh, examples/gpt, bench/gpt/largest.sh, 2026-11-26 and 28 (docs/benchmarks/gpt.md)",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "gpt_memory_fsdp2")


PLOTS = {"allreduce_openmpi": allreduce_openmpi, "hosts_allreduce_openmpi": hosts_allreduce_openmpi,
         "ddp_pytorch": ddp_pytorch, "gpt_memory_fsdp2": gpt_memory_fsdp2}

if __name__ == "__main__":
    for name in sys.argv[1:] or PLOTS:
        PLOTS[name]()
