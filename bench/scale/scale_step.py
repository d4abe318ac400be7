#!/usr/bin/python3
# One rank of the scale rehearsal's anchor (bench/scale/run.sh, under torchrun): what scale_step.cpp does,
# with torch.distributed and Gloo. Times init_process_group (joining the world), the {node, local}
# groups (new_group for every node and every local rank, as torch 1.13 has no init_device_mesh), a few
# 4 KiB allreduces on the world and on each group and a barrier; prints one SCALE line and, with
# --release FILE, holds every group open until FILE exists so the script can count its TCP connections.
import argparse, os, time

import torch
import torch.distributed as dist


def allreduce_ms(group, args):
    t = torch.ones(args.numel)
    dist.all_reduce(t, group=group)
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(t, group=group)
    return 1000 * (time.perf_counter() - start) / args.iters


def node_mesh(rank, size, local_size):
    """The {node, local} groups: every rank calls new_group for every group, in the same order."""
    assert size % local_size == 0, f"world of {size} is not a whole number of nodes of {local_size}"
    nodes = size // local_size
    mine = {}
    for node in range(nodes):
        g = dist.new_group([node * local_size + i for i in range(local_size)])
        if rank // local_size == node:
            mine["local"] = g
    for local in range(local_size):
        g = dist.new_group([n * local_size + local for n in range(nodes)])
        if rank % local_size == local:
            mine["node"] = g
    return mine


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def main():
    started_at = time.time()  # after the imports, as the C++ side's main() runs after libtorch is loaded
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--numel", type=int, default=1024)
    p.add_argument("--release", default="")
    p.add_argument("--hold-s", type=float, default=300)
    args = p.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    dist.init_process_group("gloo")
    init_s, joined_at = time.perf_counter() - start, time.time()
    rank, size = dist.get_rank(), dist.get_world_size()
    local_size = int(os.environ["LOCAL_WORLD_SIZE"])
    assert rank == int(os.environ["GROUP_RANK"]) * local_size + int(os.environ["LOCAL_RANK"]), "ranks not node-major"
    start = time.perf_counter()
    mesh = node_mesh(rank, size, local_size)
    groups_s = time.perf_counter() - start
    world_ms = allreduce_ms(None, args)
    node_ms = allreduce_ms(mesh["node"], args)
    local_ms = allreduce_ms(mesh["local"], args)
    start = time.perf_counter()
    dist.barrier()
    barrier_ms = 1000 * (time.perf_counter() - start)
    line = (f"SCALE impl=torch rank={rank} size={size} pid={os.getpid()} started_at={started_at:.3f} "
          f"joined_at={joined_at:.3f} init_s={init_s:.3f} groups_s={groups_s:.3f} world_ms={world_ms:.3f} "
          f"node_ms={node_ms:.3f} local_ms={local_ms:.3f} barrier_ms={barrier_ms:.3f} rss_mb={rss_mb():.0f}\n")
    os.write(1, line.encode())  # one write: ranks under torchrun share the launcher's stdout
    if args.release:
        start = time.perf_counter()
        while not os.path.exists(args.release) and time.perf_counter() - start < args.hold_s:
            time.sleep(0.05)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
