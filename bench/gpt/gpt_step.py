#!/usr/bin/env python3
# PyTorch's anchors for bench/gpt/gpt_step.cpp: the same GPT (models/pytorch_models.py), byte-level
# vocabulary, fp32 AdamW, random tokens, batch and threads, under DDP or FSDP2 (fully_shard on every
# block, then the root, as PyTorch's FSDP2 tutorial does), with or without activation checkpointing
# (torch.utils.checkpoint around each block). Starts --nproc ranks as fresh interpreters (spawn, so
# each rank's VmHWM is its own) and rank 0 prints a RESULT line in gpt_step.cpp's format.
import argparse, math, os, sys, time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
from pytorch_models import GPT  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ddp"))
from ddp_step import spawn_ranks  # noqa: E402


def status_mib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def checkpointed_forward(gpt):
    """GPT.forward with every block recomputed in backward (torch.utils.checkpoint, non-reentrant)."""
    def forward(idx):
        t = gpt.transformer
        x = t.drop(t.wte(idx) + t.wpe(torch.arange(idx.size(-1))))
        for block in t.h:
            x = checkpoint(block, x, use_reentrant=False)
        return F.linear(t.ln_f(x), t.wte.weight)
    return forward


def wrap(gpt, args):
    if args.mode == "ddp":
        return torch.nn.parallel.DistributedDataParallel(gpt)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (args.nproc,))
    for block in gpt.transformer.h:
        fully_shard(block, mesh=mesh)
    return fully_shard(gpt, mesh=mesh)


def initialise(gpt, n_layer):
    """GPT's own initialisation again, on the shards: what a meta-device model needs after to_empty."""
    with torch.no_grad():
        for name, p in gpt.named_parameters():
            if ".ln_" in name:
                p.fill_(0.0 if name.endswith(".bias") else 1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02)


def rank_main(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    rss_start = status_mib("VmRSS")
    torch.manual_seed(0)
    # --meta-init: FSDP2's way to build a model larger than a rank (the tutorial's meta device):
    # no storage until fully_shard has sharded it, then each rank allocates and initialises its shards.
    with torch.device("meta" if args.meta_init else "cpu"):
        gpt = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size, args.vocab_size)
    params = sum(p.numel() for p in gpt.parameters())
    rss_built = status_mib("VmRSS")
    if args.activation_checkpointing:
        gpt.forward = checkpointed_forward(gpt)
    model = wrap(gpt, args)
    if args.meta_init:
        model.to_empty(device="cpu")
        initialise(model, args.n_layer)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rss_wrapped = status_mib("VmRSS")
    tokens = torch.randint(0, args.vocab_size, (args.batch_size, args.block_size + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        opt.zero_grad()
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).backward()
        opt.step()
    dist.barrier()
    elapsed = time.perf_counter() - start
    mine = torch.tensor([rss_start, rss_built, rss_wrapped, status_mib("VmRSS"), status_mib("VmHWM")], dtype=torch.double)
    rows = [torch.zeros_like(mine) for _ in range(args.nproc)]
    dist.all_gather(rows, mine)
    every = torch.stack(rows)
    if rank == 0:
        mode = f"torch{torch.__version__.split('+')[0]}_{'fsdp2' if args.mode == 'fsdp' else 'ddp'}"
        print(f"RESULT impl=pytorch mode={mode}{'+ckpt' if args.activation_checkpointing else ''}{'+meta-init' if args.meta_init else ''} ranks={args.nproc} "
              f"n_layer={args.n_layer} n_embd={args.n_embd} params={params} "
              f"samples_per_s={args.steps * args.batch_size * args.nproc / elapsed:.3f} step_s={elapsed / args.steps:.3f} "
              f"rss_start_mib={every[:, 0].max():.0f} rss_built_mib={every[:, 1].max():.0f} "
              f"rss_wrapped_mib={every[:, 2].max():.0f} rss_end_mib={every[:, 3].max():.0f} "
              f"peak_max_mib={every[:, 4].max():.0f} peak_sum_mib={every[:, 4].sum():.0f}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "fsdp"], default="fsdp")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--meta-init", action="store_true", help="fsdp: build on the meta device, shard, then allocate")
    p.add_argument("--nproc", type=int, default=2)
    for name, default in [("n-layer", 6), ("n-head", 6), ("n-embd", 384), ("block-size", 128), ("vocab-size", 256),
                          ("batch-size", 4), ("steps", 10), ("warmup", 2), ("threads", 1)]:
        p.add_argument(f"--{name}", type=int, default=default)
    args = p.parse_args()
    if args.meta_init and args.mode != "fsdp":
        p.error("--meta-init needs --mode fsdp (DDP needs every rank's whole model)")
    spawn_ranks(rank_main, args, method="spawn")  # fresh interpreters: each VmHWM its own


if __name__ == "__main__":
    main()
