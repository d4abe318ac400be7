#!/usr/bin/env python3
# DeepSpeed's side of bench/gpt/deepspeed.sh (issue 40): the GPT of bench/gpt/gpt_step.py
# (models/pytorch_models.py, byte-level vocabulary, fp32, random tokens, the same batch and threads)
# under DeepSpeed's ZeRO stage 3 on its CPU accelerator (DS_ACCELERATOR=cpu) with Gloo, AdamW at
# lr 1e-4 (DeepSpeed's "AdamW": DeepSpeedCPUAdam in adamw_mode when the optimizer is offloaded, its
# CPU FusedAdam otherwise), optionally with the optimizer state and/or the parameters offloaded to
# cpu or nvme (ZeRO-Infinity, its async_io op). Settings as cohort's gpt_step --mode zero3: overlap_comm,
# DeepSpeed's default prefetch (5e7) and reduce (5e8) buckets, weight decay 0 (both defaults).
# Starts --nproc ranks as fresh interpreters (spawn, so each rank's VmHWM is its own) and rank 0 prints
# a RESULT line in gpt_step.cpp's format. Run it with the 2.11 venv's python, deepspeed installed there.
import argparse, os, sys, time

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported: its accelerator is chosen then

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
from pytorch_models import GPT  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ddp"))
from ddp_step import spawn_ranks  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_step import status_mib  # noqa: E402


def ds_config(args):
    zero = {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "stage3_prefetch_bucket_size": args.prefetch_bucket_size,
        "reduce_bucket_size": args.reduce_bucket_size,
    }
    if args.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": args.offload_optimizer, "pin_memory": False}
        if args.offload_optimizer == "nvme":
            zero["offload_optimizer"]["nvme_path"] = args.nvme_path
    if args.offload_params != "none":
        zero["offload_param"] = {"device": args.offload_params, "pin_memory": False}
        if args.offload_params == "nvme":
            # max_in_cpu 0 as cohort's gpt_step; buffer_count and buffer_size stay DeepSpeed's defaults
            # unless given (its swap buffers are buffer_count x buffer_size elements).
            zero["offload_param"].update(nvme_path=args.nvme_path, max_in_cpu=0)
            if args.param_buffer_size:
                zero["offload_param"]["buffer_size"] = args.param_buffer_size
            if args.param_buffer_count:
                zero["offload_param"]["buffer_count"] = args.param_buffer_count
    config = {
        "train_micro_batch_size_per_gpu": args.batch_size,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}},
        "zero_optimization": zero,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if "nvme" in (args.offload_optimizer, args.offload_params):
        # DeepSpeed's aio defaults, as cohort's AioConfig (1 MiB blocks, queue depth 8)
        config["aio"] = {"block_size": 1048576, "queue_depth": 8, "thread_count": 1,
                         "single_submit": False, "overlap_events": True}
    return config


def rank_main(rank, args, port):
    import deepspeed  # in the rank: its accelerator and logger are set up in this interpreter

    torch.set_num_threads(args.threads)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.nproc),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    rss_start = status_mib("VmRSS")
    torch.manual_seed(0)
    if args.zero_init:  # DeepSpeed's zero.Init: every parameter partitioned as it is made (gpt_step's --sharded-init)
        with deepspeed.zero.Init(config_dict_or_path=ds_config(args)):
            gpt = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size, args.vocab_size)
        params = sum(getattr(p, "ds_numel", p.numel()) for p in gpt.parameters())
    else:
        gpt = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size, args.vocab_size)
        params = sum(p.numel() for p in gpt.parameters())
    rss_built = status_mib("VmRSS")
    engine, _, _, _ = deepspeed.initialize(model=gpt, model_parameters=gpt.parameters(), config=ds_config(args))
    rss_wrapped = status_mib("VmRSS")
    optimizer_class = type(engine.optimizer.optimizer).__name__ if hasattr(engine.optimizer, "optimizer") else "?"
    tokens = torch.randint(0, args.vocab_size, (args.batch_size, args.block_size + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]
    first_loss = last_loss = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        logits = engine(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        engine.backward(loss)
        engine.step()
        last_loss = loss.item()
        if step == 0:
            first_loss = last_loss
    dist.barrier()
    elapsed = time.perf_counter() - start
    mine = torch.tensor([rss_start, rss_built, rss_wrapped, status_mib("VmRSS"), status_mib("VmHWM")], dtype=torch.double)
    rows = [torch.zeros_like(mine) for _ in range(args.nproc)]
    dist.all_gather(rows, mine)
    every = torch.stack(rows)
    if rank == 0:
        suffix = (("+zero-init" if args.zero_init else "") +
                  (f"+optimizer-{args.offload_optimizer}" if args.offload_optimizer != "none" else "") +
                  (f"+params-{args.offload_params}" if args.offload_params != "none" else ""))
        print(f"RESULT impl=deepspeed mode=ds{deepspeed.__version__}_zero3{suffix} ranks={args.nproc} "
              f"n_layer={args.n_layer} n_embd={args.n_embd} params={params} "
              f"samples_per_s={args.steps * args.batch_size * args.nproc / elapsed:.3f} step_s={elapsed / args.steps:.3f} "
              f"rss_start_mib={every[:, 0].max():.0f} rss_built_mib={every[:, 1].max():.0f} "
              f"rss_wrapped_mib={every[:, 2].max():.0f} rss_end_mib={every[:, 3].max():.0f} "
              f"peak_max_mib={every[:, 4].max():.0f} peak_sum_mib={every[:, 4].sum():.0f} "
              f"torch={torch.__version__.split('+')[0]} backend={dist.get_backend()} optimizer={optimizer_class} "
              f"first_loss={first_loss:.4f} last_loss={last_loss:.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    for name, default in [("n-layer", 6), ("n-head", 6), ("n-embd", 384), ("block-size", 128), ("vocab-size", 256),
                          ("batch-size", 4), ("steps", 10), ("warmup", 2), ("threads", 1)]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--offload-optimizer", choices=["none", "cpu", "nvme"], default="none")
    p.add_argument("--offload-params", choices=["none", "cpu", "nvme"], default="none")
    p.add_argument("--nvme-path", default="/tmp/deepspeed-offload-bench")
    p.add_argument("--zero-init", action="store_true", help="build the model under deepspeed.zero.Init")
    p.add_argument("--stage3-prefetch-bucket-size", dest="prefetch_bucket_size", type=int, default=50_000_000)
    p.add_argument("--reduce-bucket-size", type=int, default=500_000_000)
    p.add_argument("--param-buffer-size", type=int, default=0, help="offload_param.buffer_size (0: DeepSpeed's 1e8)")
    p.add_argument("--param-buffer-count", type=int, default=0, help="offload_param.buffer_count (0: DeepSpeed's 5)")
    args = p.parse_args()
    if "nvme" in (args.offload_optimizer, args.offload_params):
        os.makedirs(args.nvme_path, exist_ok=True)
    spawn_ranks(rank_main, args, method="spawn")  # fresh interpreters: each VmHWM its own


if __name__ == "__main__":
    main()
