#!/usr/bin/env python3
"""Writes the DCP fixtures of tests/dcp_reader_test.cpp (cohort's reader of PyTorch's
torch.distributed.checkpoint format): a real 2-rank FSDP2 checkpoint made by PyTorch 2.11 on CPU (gloo),
under tests/data/dcp/tiny/ (and its .metadata at protocol 2 beside it), and seeds for the fuzz targets under fuzz/corpus/dcp_metadata/ and
fuzz/corpus/dcp_item/. Run once with PyTorch >= 2.6 (the unit tests read the files and need no torch):
    ~/.cache/cohort/torch-2.11.0/bin/python tests/python/dcp_fixtures.py

What the test expects (closed form, set after the optimizer step so AdamW's update does not blur it):
  model.0.weight  nn.Linear(2, 3, bias=False).weight = arange(6).reshape(3, 2) as float32, size (3, 2),
                  sharded dim 0 over 2 ranks: rank 0 rows 0-1 (offsets (0,0) sizes (2,2)), rank 1 row 2.
  optimizer.state.0.weight.exp_avg     = 10 * weight + 1 (sharded the same way)
  optimizer.state.0.weight.exp_avg_sq  sharded the same way; optimizer.state.0.weight.step  0-d float32
  optimizer.param_groups.0.{lr=0.001, betas=(0.9, 0.999), params=['0.weight'], amsgrad=False, ...} BYTE_IO
  extra.transposed  arange(6.).reshape(2, 3).t(): size (3, 2), saved with strides (1, 3)
  extra.bf16        tensor([1.5, -2.0], bfloat16)
  extra.i64         arange(3, int64) + 7
"""
import os
import pathlib
import pickle
import shutil
import socket
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "dcp" / "tiny"


def set_local(dtensor, full, rank, ws):
    """Copies this rank's dim-0 chunk (torch.chunk rule, as Shard(0)) of `full` into the DTensor."""
    with torch.no_grad():
        dtensor.to_local().copy_(full.chunk(ws)[rank])


def run(rank, ws, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=ws)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(2, 3, bias=False))
    fully_shard(m, mesh=init_device_mesh("cpu", (ws,)))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m(torch.ones(1, 2)).sum().backward()
    opt.step()
    weight = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    set_local(m[0].weight, weight, rank, ws)
    set_local(opt.state[m[0].weight]["exp_avg"], 10 * weight + 1, rank, ws)
    msd, osd = get_state_dict(m, opt)
    extra = {
        "transposed": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
        "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "i64": torch.arange(3, dtype=torch.int64) + 7,
    }
    # A relative checkpoint_id: storage_meta's PosixPath is then ('tiny',), not this machine's path.
    os.chdir(OUT.parent)
    dcp.save({"model": msd, "optimizer": osd, "extra": extra}, checkpoint_id=OUT.name)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_protocol2():
    """The same Metadata pickled at protocol 2 (GLOBAL, BINPUT/BINGET, BINUNICODE, no frames), as a
    Python 3 saving with protocol=2 would: tests/data/dcp/tiny_protocol2.metadata."""
    md = pickle.loads((OUT / ".metadata").read_bytes())
    (OUT.parent / "tiny_protocol2.metadata").write_bytes(pickle.dumps(md, protocol=2))


def write_seeds():
    """Fuzz seeds: the .metadata (protocols 4 and 2), and four items cut from the .distcp files (a
    sharded tensor, the strided one, a BYTE_IO float, the list of param names)."""
    md_dir = ROOT / "fuzz" / "corpus" / "dcp_metadata"
    item_dir = ROOT / "fuzz" / "corpus" / "dcp_item"
    md_dir.mkdir(parents=True, exist_ok=True)
    item_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(OUT / ".metadata", md_dir / "tiny_2ranks.metadata")
    shutil.copyfile(OUT.parent / "tiny_protocol2.metadata", md_dir / "tiny_protocol2.metadata")
    md = pickle.loads((OUT / ".metadata").read_bytes())
    wanted = {"model.0.weight": "weight_rank0", "extra.transposed": "transposed",
              "optimizer.param_groups.0.lr": "lr", "optimizer.param_groups.0.params": "params"}
    for index, info in md.storage_data.items():
        name = wanted.pop(index.fqn, None)
        if name is None:
            continue
        data = (OUT / info.relative_path).read_bytes()[info.offset:info.offset + info.length]
        (item_dir / f"{name}.zip").write_bytes(data)


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    mp.spawn(run, args=(2, free_port()), nprocs=2)
    write_protocol2()
    write_seeds()
    md = pickle.loads((OUT / ".metadata").read_bytes())
    for fqn, entry in sorted(md.state_dict_metadata.items()):
        print(fqn, type(entry).__name__, getattr(entry, "size", ""), [
            (tuple(c.offsets), tuple(c.sizes)) for c in getattr(entry, "chunks", [])])
    for index, info in sorted(md.storage_data.items(), key=lambda kv: (kv[0].fqn, tuple(kv[0].offset or ()))):
        print(" ", index.fqn, tuple(index.offset) if index.offset is not None else None, info.relative_path,
              info.offset, info.length)


if __name__ == "__main__":
    sys.exit(main())
