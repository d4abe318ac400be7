#!/usr/bin/env python3
# PyTorch's anchors for bench/gpt/gpt_step.cpp: the same GPT (models/pytorch_models.py), byte-level
# vocabulary, fp32 AdamW, random tokens, batch and threads, under DDP or FSDP2 (fully_shard on every
# block, then the root, as PyTorch's FSDP2 tutorial does), with or without activation checkpointing
# (torch.utils.checkpoint around each block). --tp N: tensor parallel first (parallelize_module over a
# 2-D init_device_mesh's "tp" dimension, Megatron's split as models/gpt.h's plan: qkv and fc
# column-wise, the projections row-wise, the embedding by vocabulary, the tied head's logits split by
# vocabulary into loss_parallel), then fully_shard over its "dp" dimension, as PyTorch's 2-D tutorial
# does. Starts --nproc ranks as fresh interpreters (spawn, so each rank's VmHWM is its own) and rank 0
# prints a RESULT line in gpt_step.cpp's format.
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


def head_aligned_qkv(attn, tp):
    """Reorders c_attn's rows [q; k; v] as [q_0; k_0; v_0; q_1; ...] so that ColwiseParallel's contiguous
    cut gives each tp rank the q, k and v of its own heads (models/gpt.h's plan cuts each of the three)."""
    with torch.no_grad():
        for p in [attn.c_attn.weight] + ([attn.c_attn.bias] if attn.c_attn.bias is not None else []):
            q, k, v = p.chunk(3, dim=0)
            p.copy_(torch.cat([part for r in range(tp) for part in (q.chunk(tp)[r], k.chunk(tp)[r], v.chunk(tp)[r])]))


def local_attention_forward(self, x):
    """CausalSelfAttention.forward over this rank's heads: c_attn's local output is [b, t, 3 e/tp]."""
    b, t, _ = x.shape
    qkv = self.c_attn(x)
    e = qkv.size(-1) // 3
    q, k, v = (y.view(b, t, self.n_head, e // self.n_head).transpose(1, 2) for y in qkv.split(e, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, None, 0.0, True)
    return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, e))


def tensor_parallel(gpt, tp_mesh):
    """Megatron's split of the GPT over tp_mesh; the head's logits come out split by vocabulary."""
    import types
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    tp = tp_mesh.size()
    for block in gpt.transformer.h:
        head_aligned_qkv(block.attn, tp)
        parallelize_module(block, tp_mesh, {"attn.c_attn": ColwiseParallel(), "attn.c_proj": RowwiseParallel(),
                                            "mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel()})
        block.attn.n_head //= tp
        block.attn.forward = types.MethodType(local_attention_forward, block.attn)
    parallelize_module(gpt.transformer.wte, tp_mesh, RowwiseParallel(input_layouts=Replicate()))

    def forward(self, idx):
        t = self.transformer
        x = t.drop(t.wte(idx) + t.wpe(torch.arange(idx.size(-1))))
        for block in t.h:
            x = block(x)
        # The tied head on the vocabulary-split table: logits Shard(-1); the input's gradient is summed
        # over the tp group in backward (from_local's Replicate), as the plan's head does.
        h = DTensor.from_local(t.ln_f(x), tp_mesh, [Replicate()], run_check=False)
        logits = F.linear(h, t.wte.weight)
        return logits.reshape(-1, logits.size(-1))
    gpt.forward = types.MethodType(forward, gpt)


def wrap(gpt, args):
    if args.mode == "ddp":
        return torch.nn.parallel.DistributedDataParallel(gpt)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    if args.tp > 1:
        mesh2d = init_device_mesh("cpu", (args.nproc // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
        tensor_parallel(gpt, mesh2d["tp"])
        mesh = mesh2d["dp"]
    else:
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
    losses = []
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        opt.zero_grad()
        logits = model(x)
        if args.tp > 1:  # vocabulary-split logits: the loss without gathering them
            from torch.distributed.tensor.parallel import loss_parallel
            with loss_parallel():
                loss = F.cross_entropy(logits, y.reshape(-1))
                loss.backward()
        else:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            loss.backward()
        opt.step()
        losses.append(loss.full_tensor().item() if hasattr(loss, "full_tensor") else loss.item())
    dist.barrier()
    elapsed = time.perf_counter() - start
    mine = torch.tensor([rss_start, rss_built, rss_wrapped, status_mib("VmRSS"), status_mib("VmHWM")], dtype=torch.double)
    rows = [torch.zeros_like(mine) for _ in range(args.nproc)]
    dist.all_gather(rows, mine)
    every = torch.stack(rows)
    if rank == 0:
        mode = f"torch{torch.__version__.split('+')[0]}_{'fsdp2' if args.mode == 'fsdp' else 'ddp'}"
        mode += f"+tp{args.tp}" if args.tp > 1 else ""
        print(f"RESULT impl=pytorch mode={mode}{'+ckpt' if args.activation_checkpointing else ''}{'+meta-init' if args.meta_init else ''} ranks={args.nproc} "
              f"n_layer={args.n_layer} n_embd={args.n_embd} params={params} "
              f"samples_per_s={args.steps * args.batch_size * (args.nproc // args.tp) / elapsed:.3f} step_s={elapsed / args.steps:.3f} "
              f"rss_start_mib={every[:, 0].max():.0f} rss_built_mib={every[:, 1].max():.0f} "
              f"rss_wrapped_mib={every[:, 2].max():.0f} rss_end_mib={every[:, 3].max():.0f} "
              f"peak_max_mib={every[:, 4].max():.0f} peak_sum_mib={every[:, 4].sum():.0f} "
              f"first_loss={losses[0]:.4f} last_loss={losses[-1]:.4f}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "fsdp"], default="fsdp")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--meta-init", action="store_true", help="fsdp: build on the meta device, shard, then allocate")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--tp", type=int, default=1, help="fsdp: tensor parallel over groups of this many ranks")
    for name, default in [("n-layer", 6), ("n-head", 6), ("n-embd", 384), ("block-size", 128), ("vocab-size", 256),
                          ("batch-size", 4), ("steps", 10), ("warmup", 2), ("threads", 1)]:
        p.add_argument(f"--{name}", type=int, default=default)
    args = p.parse_args()
    if args.meta_init and args.mode != "fsdp":
        p.error("--meta-init needs --mode fsdp (DDP needs every rank's whole model)")
    if args.tp > 1 and (args.mode != "fsdp" or args.meta_init or args.activation_checkpointing or args.nproc % args.tp):
        p.error("--tp needs --mode fsdp, without --meta-init or --activation-checkpointing, and must divide --nproc")
    spawn_ranks(rank_main, args, method="spawn")  # fresh interpreters: each VmHWM its own


if __name__ == "__main__":
    main()
