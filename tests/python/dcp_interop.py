#!/usr/bin/env python3
# The Python side of tests/dcp_interop_test.cpp: models/pytorch_models.py's GPT under FSDP2 (fully_shard on
# each block and the root, gloo on the CPU, N processes) with AdamW, saving and loading PyTorch's
# torch.distributed.checkpoint (DCP) state dicts ({"model": ..., "optimizer": ...} from get_state_dict).
#   dcp_interop.py save DIR WORLD STEPS LR PORT N_LAYER N_HEAD N_EMBD BLOCK VOCAB BIAS
#       trains STEPS AdamW steps on seeded batches, dcp.save to DIR, then prints the loss on the fixed batch
#       ("loss <x>") and, after one more AdamW step on that batch, "step_loss <y>"
#   dcp_interop.py load DIR WORLD LR PORT N_LAYER N_HEAD N_EMBD BLOCK VOCAB BIAS
#       dcp.load of DIR into a freshly built model and optimizer, then the same two lines
# The fixed batch is tests/python/gpt_interop.py's. Needs PyTorch 2.11 (FSDP2, DCP).
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "models"))
from gpt_interop import fixed_batch  # noqa: E402
from pytorch_models import GPT  # noqa: E402


def build(world, lr, shape, betas=(0.9, 0.99), weight_decay=0.1):
    n_layer, n_head, n_embd, block, vocab, bias = shape
    torch.manual_seed(1234)
    model = GPT(n_layer, n_head, n_embd, block, vocab, 0.0, bias)
    mesh = init_device_mesh("cpu", (world,))
    for b in model.transformer.h:
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # cohort's engine steps LibTorch's AdamW: one tensor at a time, as foreach=False does here.
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, eps=1e-8, weight_decay=weight_decay,
                            foreach=False)
    return model, opt


def loss_on(model, batch, vocab):
    tokens, targets = batch
    return F.cross_entropy(model(tokens).reshape(-1, vocab), targets.reshape(-1))


def report(model, opt, shape):
    """The fixed batch's loss, then the loss after one AdamW step on it (every rank the same batch)."""
    block, vocab = shape[3], shape[4]
    batch = fixed_batch(block, vocab)
    with torch.no_grad():
        before = loss_on(model, batch, vocab).item()
    opt.zero_grad()
    loss_on(model, batch, vocab).backward()
    opt.step()
    with torch.no_grad():
        after = loss_on(model, batch, vocab).item()
    if dist.get_rank() == 0:
        print(f"loss {before:.10f}\nstep_loss {after:.10f}", flush=True)


def run(rank, mode, directory, world, steps, lr, port, shape):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    # A load builds its optimizer with other hyper-parameters: the checkpoint's param_groups replace them,
    # so the step after the load matches only when they were written right.
    model, opt = build(world, lr, shape) if mode == "save" else build(world, 10 * lr, shape, (0.5, 0.5), 0.0)
    model.eval()  # no dropout in the models compared; eval keeps it so
    if mode == "save":
        block, vocab = shape[3], shape[4]
        for step in range(steps):
            g = torch.Generator().manual_seed(500 + step)
            tokens = torch.randint(0, vocab, (2 * world, block + 1), generator=g)[2 * rank:2 * rank + 2]
            opt.zero_grad()
            loss_on(model, (tokens[:, :-1], tokens[:, 1:]), vocab).backward()
            opt.step()
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=directory)
    else:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optimizer": osd}
        dcp.load(state, checkpoint_id=directory)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    report(model, opt, shape)
    dist.barrier()
    dist.destroy_process_group()


def main():
    mode, directory, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rest = sys.argv[4:]
    steps = int(rest.pop(0)) if mode == "save" else 0
    lr, port = float(rest[0]), int(rest[1])
    n_layer, n_head, n_embd, block, vocab, bias = (int(x) for x in rest[2:8])
    shape = (n_layer, n_head, n_embd, block, vocab, bool(bias))
    mp.spawn(run, args=(mode, directory, world, steps, lr, port, shape), nprocs=world)


if __name__ == "__main__":
    main()
