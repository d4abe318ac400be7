#!/usr/bin/env python3
# PyTorch 2.11's anchor for bench/checkpoint/save_step.cpp: the same GPT (models/pytorch_models.py) under
# FSDP2 (fully_shard per block, then the root) with AdamW, saved by torch.distributed.checkpoint in rounds:
# plain steps, dcp.save (the time it blocks every rank), then dcp.async_save (the time its call blocks,
# with the steps that run until its future is done), then plain steps again. async_save gets a gloo
# process group of its own, as its documentation advises. Rank 0 prints save_step.cpp's RESULT line.
import argparse, os, shutil, statistics, sys, time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
from pytorch_models import GPT  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ddp"))
from ddp_step import spawn_ranks  # noqa: E402


def slowest(value):
    t = torch.tensor([value], dtype=torch.double)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def rank_main(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    writer_group = dist.new_group(backend="gloo")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    gpt = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size, 256)
    mesh = init_device_mesh("cpu", (args.nproc,))
    for block in gpt.transformer.h:
        fully_shard(block, mesh=mesh)
    model = fully_shard(gpt, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 256, (args.batch_size, args.block_size + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        opt.zero_grad()
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).backward()
        opt.step()

    def timed_step():
        dist.barrier()
        start = time.perf_counter()
        step()
        return slowest(time.perf_counter() - start)

    def state():
        model_state, optim_state = get_state_dict(model, opt)
        return {"model": model_state, "optimizer": optim_state}

    step()  # warm up: AdamW's moments exist from here
    n = 0
    for _ in range(args.rounds):
        plain = [timed_step() for _ in range(args.plain_steps)]
        n += 1
        dist.barrier()
        start = time.perf_counter()
        dcp.save(state(), checkpoint_id=os.path.join(args.dir, f"step-{n}"))
        sync_blocked = slowest(time.perf_counter() - start)
        n += 1
        dist.barrier()
        start = time.perf_counter()
        future = dcp.async_save(state(), checkpoint_id=os.path.join(args.dir, f"step-{n}"), process_group=writer_group)
        async_blocked = slowest(time.perf_counter() - start)
        during = []
        while slowest(0.0 if future.done() else 1.0) > 0:
            s = time.perf_counter()
            step()
            during.append(slowest(time.perf_counter() - s))
        future.result()
        write = slowest(time.perf_counter() - start)
        after = [timed_step() for _ in range(args.plain_steps)]
        dist.barrier()
        if rank == 0:
            for old in range(1, n - 1):  # keep the last two, as save_step.cpp does
                shutil.rmtree(os.path.join(args.dir, f"step-{old}"), ignore_errors=True)
            params = sum(p.numel() for p in gpt.parameters())
            print(f"RESULT mode=torch{torch.__version__.split('+')[0]}_fsdp2_dcp ranks={args.nproc} params={params} "
                  f"step_s={statistics.median(plain):.4f} sync_blocked_s={sync_blocked:.4f} "
                  f"async_blocked_s={async_blocked:.4f} steps_during={len(during)} "
                  f"step_during_s={statistics.median(during) if during else 0:.4f} write_s={write:.3f} "
                  f"step_after_s={statistics.median(after):.4f}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--nproc", type=int, default=2)
    for name, default in [("n-layer", 16), ("n-head", 16), ("n-embd", 1024), ("block-size", 64), ("batch-size", 1),
                          ("rounds", 3), ("plain-steps", 3), ("threads", 1)]:
        p.add_argument(f"--{name}", type=int, default=default)
    spawn_ranks(rank_main, p.parse_args(), method="spawn")


if __name__ == "__main__":
    main()
