#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus (fuzz/corpus/<target>/): small valid inputs of each format,
so libFuzzer starts from what cohort really reads. The manifest seeds are real checkpoints'
(fuzz/corpus/manifest/), copied once from a 2-rank Fashion-MNIST run, plus small hostile ones made here
(file names leading out of the checkpoint, shapes and names a safetensors file cannot hold); the rest
are made here."""
import gzip
import json
import pathlib
import struct

root = pathlib.Path(__file__).parent / "corpus"


def write(target, name, data):
    folder = root / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())


write("ds_config", "seeds_example.json", """{
  "train_batch_size": 64,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8}},
  "fp16": {"enabled": false,},
  "zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": 5e8}
}""")
write("ds_config", "stage3_fp16_scheduler.json", """{
  "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                "warmup_num_steps": 100, "total_num_steps": 1000, "warmup_type": "linear"}},
  "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
           "hysteresis": 2, "min_loss_scale": 1},
  "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 1000000}
}""")
write("ds_config", "bf16_comments.json", """// hjson-style comments and nulls
{
  "train_batch_size": null, /* resolved from the other two */
  "train_micro_batch_size_per_gpu": 16,
  "bf16": {"enabled": true},
  "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_type": "log"}},
  "zero_optimization": {"stage": 1}
}""")


def idx(magic, shape, payload):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in shape) + payload


images = idx(0x00000803, (2, 3, 3), bytes(range(18)))
write("idx", "images.idx", images)
write("idx", "labels.idx", idx(0x00000801, (2,), bytes([3, 7])))
write("idx", "images.idx.gz", gzip.compress(images, mtime=0))

payload = bytes(range(16))
header = b"COHORTS1" + struct.pack("<IIIIq", 1, 1, 2, 0, len(payload))
write("shard", "rank1_of_2.bin", header + payload)


def manifest(file_name="shard-00000-of-00001.bin", shape=(2,), names=("model/w",)):
    """A one-rank manifest of float32 tensors of `shape`, each 8 bytes in `file_name`."""
    tensors = [{"name": name, "kind": "replicated", "dtype": "float32", "shape": list(shape), "flat_numel": 0,
                "pieces": [{"rank": 0, "file": file_name, "byte_offset": 8 * i, "nbytes": 8, "crc32": 0,
                            "offset": 0, "numel": 2}]} for i, name in enumerate(names)]
    return json.dumps({"format": "cohort-checkpoint", "format_version": 1, "library_version": "0.1.0", "step": 7,
                       "world_size": 1, "zero_stage": 0, "created": "2026-11-25T22:00:00Z",
                       "files": [{"name": file_name, "rank": 0, "payload_bytes": 8 * len(names)}],
                       "tensors": tensors, "values": {"model": {}}, "user": {}}, indent=1)


# Paths that lead out of the step directory (issue 28): every one must be refused by name, unread.
write("manifest", "traversal_dotdot.json", manifest("../../../outside/evil.bin"))
write("manifest", "traversal_passwd.json", manifest("../../../../../etc/passwd"))
write("manifest", "traversal_absolute.json", manifest("/etc/passwd"))
write("manifest", "traversal_parent.json", manifest(".."))
write("manifest", "traversal_subdir.json", manifest("sub/shard-00000-of-00001.bin"))
# Shapes and names a safetensors header cannot hold (issue 28): refused as well.
write("manifest", "shape_negative.json", manifest(shape=(-1, -2)))
write("manifest", "shape_overflow.json", manifest(shape=(1 << 62, 4)))
write("manifest", "name_twice.json", manifest(names=("model/w", "model/w")))


def safetensors(tensors, metadata=None):
    """A safetensors file of float32 tensors given as (name, shape, values)."""
    header, data = {}, b""
    for name, shape, values in tensors:
        payload = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


# Pretrained weights (issue 42): a file, and sharded sets' indexes (one leading out of its directory).
write("safetensors", "two_tensors.safetensors",
      safetensors([("fc.weight", (2, 3), [0.5] * 6), ("fc.bias", (2,), [1.0, -1.0])], {"format": "pt"}))
write("safetensors", "index.json", json.dumps(
    {"metadata": {"total_size": 32}, "weight_map": {"fc.weight": "model-00001-of-00002.safetensors",
                                                    "fc.bias": "model-00002-of-00002.safetensors"}}))
write("safetensors", "index_traversal.json", json.dumps({"weight_map": {"fc.weight": "../../etc/passwd"}}))
