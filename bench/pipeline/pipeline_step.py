#!/usr/bin/env python3
# torch.distributed.pipelining (PipelineStage with ScheduleGPipe, Schedule1F1B or
# ScheduleInterleaved1F1B, Gloo on CPU) on the same deep MLP, batch, chunks and threads as
# bench/pipeline/pipeline_step.cpp, measured the same way (ClockMark layers and parameter hooks time
# each rank's compute; the rest of a step is the bubble). Starts --nproc ranks itself (fork); rank 0
# prints one RESULT line. --mode single trains the whole model in this process on the whole batch.
# Needs PyTorch 2.x (~/.cache/cohort/torch-2.11.0/bin/python): Debian's 1.13 has no pipelining.
import argparse, resource, socket, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B


class ComputeClock:
    """Seconds inside stages' forward and backward (the same state machine as compute_clock.h)."""

    def __init__(self):
        self.state, self.progressed, self.start, self.last, self.busy = "idle", False, 0.0, 0.0, 0.0

    def forward_begin(self):
        self.commit()
        self.state, self.start = "forward", time.perf_counter()

    def forward_end(self):
        if self.state == "forward":
            self.busy += time.perf_counter() - self.start
        self.state = "idle"

    def backward_begin(self):
        if self.state == "backward" and not self.progressed:
            return  # the loss's gradient, then the same stage's output: one backward
        self.commit()
        self.state, self.progressed = "backward", False
        self.start = self.last = time.perf_counter()

    def backward_progress(self):
        if self.state == "backward":
            self.progressed, self.last = True, time.perf_counter()

    def commit(self):
        if self.state == "backward" and self.progressed:
            self.busy += self.last - self.start
        self.state = "idle"

    def reset(self):
        self.commit()
        self.busy = 0.0


CLOCK = ComputeClock()


class ClockMark(nn.Module):
    """Opens (begin) or closes a stage for CLOCK; passes its input through."""

    def __init__(self, begin):
        super().__init__()
        self.begin = begin

    def forward(self, x):
        if self.begin:
            CLOCK.forward_begin()
            return x
        CLOCK.forward_end()
        if x.requires_grad:
            x.register_hook(lambda grad: CLOCK.backward_begin())
        return x


def marked_stages(args, stages):
    """The model as `stages` Sequentials: ClockMark, its blocks (the last also the head), ClockMark."""
    assert args.blocks % stages == 0, f"--blocks {args.blocks} is not a multiple of the stage count {stages}"
    result = []
    for s in range(stages):
        layers = [ClockMark(True)]
        for b in range(args.blocks // stages):
            linear = nn.Linear(args.width, args.width)
            if b == 0:  # the last gradients a stage's backward computes
                for p in linear.parameters():
                    p.register_hook(lambda grad: CLOCK.backward_progress())
            layers += [linear, nn.ReLU()]
        if s == stages - 1:
            layers.append(nn.Linear(args.width, 10))
        layers.append(ClockMark(False))
        result.append(nn.Sequential(*layers))
    return result


def timed_loss(out, y):
    CLOCK.forward_begin()
    loss = F.cross_entropy(out, y)
    CLOCK.forward_end()
    loss.register_hook(lambda grad: CLOCK.backward_begin())
    return loss


def current_rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def make_schedule(args, rank, ranks, modules):
    total = len(modules)
    mine = [PipelineStage(modules[s], s, total, torch.device("cpu")) for s in range(rank, total, ranks)]
    if args.schedule == "interleaved":
        return ScheduleInterleaved1F1B(mine, args.chunks, loss_fn=timed_loss)
    kind = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
    return kind(mine[0], args.chunks, loss_fn=timed_loss)


def train(args, params, step_once, barrier):
    """(elapsed, seconds inside step_once, compute seconds) over the timed steps."""
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    in_step = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            barrier()
            start, in_step = time.perf_counter(), 0.0
            CLOCK.reset()
        opt.zero_grad()
        t = time.perf_counter()
        step_once()
        CLOCK.commit()
        in_step += time.perf_counter() - t
        opt.step()
    barrier()
    return time.perf_counter() - start, in_step, CLOCK.busy


def rank_main(rank, args, port):
    torch.set_num_threads(args.threads)
    ranks = args.nproc
    if args.mode == "pipeline":
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)
    per_rank = args.stages_per_rank if args.schedule == "interleaved" and args.mode == "pipeline" else 1
    rss_before = current_rss_mb()
    torch.manual_seed(0)
    modules = marked_stages(args, ranks * per_rank)
    x, y = torch.randn(args.batch, args.width), torch.randint(0, 10, (args.batch,))
    if args.mode == "single":
        model = modules[0]
        measured = train(args, model.parameters(), lambda: timed_loss(model(x), y).backward(), lambda: None)
    else:
        schedule = make_schedule(args, rank, ranks, modules)
        params = [p for s in range(rank, len(modules), ranks) for p in modules[s].parameters()]

        def step_once():
            if rank == 0:
                schedule.step(x, return_outputs=False)
            elif rank == ranks - 1:
                schedule.step(target=y, losses=[], return_outputs=False)
            else:
                schedule.step(return_outputs=False)

        measured = train(args, params, step_once, dist.barrier)
    report(args, rank, measured, rss_before, per_rank)
    if args.mode == "pipeline":
        dist.destroy_process_group()


def report(args, rank, measured, rss_before, per_rank):
    elapsed, in_step, busy = measured
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ranks = args.nproc
    rows = torch.zeros(ranks, 3, dtype=torch.float64)
    rows[rank] = torch.tensor([1 - busy / in_step, peak, peak - rss_before], dtype=torch.float64)
    if args.mode == "pipeline":
        dist.all_reduce(rows)
    if rank != 0:
        return
    single = args.mode == "single"
    formula = 0.0 if single else (ranks - 1) / (per_rank * args.chunks + ranks - 1)
    col = lambda i, fmt: "/".join(fmt % v for v in rows[:, i].tolist())
    print(f"RESULT impl=torch schedule={'single' if single else args.schedule} ranks={ranks} v={per_rank} "
          f"chunks={1 if single else args.chunks} batch={args.batch} "
          f"samples_per_s={args.steps * args.batch / elapsed:.1f} step_ms={1000 * elapsed / args.steps:.2f} "
          f"bubble={rows[:, 0].mean().item():.3f} bubble_ranks={col(0, '%.3f')} bubble_formula={formula:.3f} "
          f"rss_mb={col(1, '%.0f')} rss_added_mb={col(2, '%.0f')}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["pipeline", "single"], default="pipeline")
    parser.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"], default="1f1b")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--stages-per-rank", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.mode == "single":
        args.nproc = 1
        return rank_main(0, args, 0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=rank_main, args=(r, args, port)) for r in range(args.nproc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode for p in procs))


if __name__ == "__main__":
    main()
