#!/usr/bin/env python3
# The Python side of tests/gpt_interop_test.cpp: models/pytorch_models.py's GPT saved to and loaded from
# safetensors files, and its loss on a fixed batch both languages compute the same way. The safetensors
# format (8-byte little-endian header length, JSON header, raw bytes) is written and read here with
# struct and json: Python's safetensors package is not a dependency of the tests.
#   gpt_interop.py save FILE N_LAYER N_HEAD N_EMBD BLOCK VOCAB BIAS       -> "loss <x>" of a seeded model
#   gpt_interop.py loss FILE PREFIX N_LAYER N_HEAD N_EMBD BLOCK VOCAB BIAS -> "loss <x>" of the file's weights
#                  (PREFIX "-": none; "engine/gpt.*.master": names between the two, as cohort-ckpt
#                  consolidate writes a Trainer's ZeRO checkpoint: its other tensors are optimizer state)
#   gpt_interop.py compare FILE_A FILE_B TOLERANCE -> "max abs difference <x> (<name>)"; exit 1 when the
#                  names differ or a difference exceeds TOLERANCE (examples/gpt --export of two meshes)
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
from pytorch_models import GPT  # noqa: E402

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


def fixed_batch(block, vocab, rows=3):
    """tests/gpt_interop_test.cpp's batch: tokens and next tokens from a formula, no random generator."""
    tokens = torch.tensor([[(7 * i + 3 * j + i * j * j) % vocab for j in range(block)] for i in range(rows)])
    targets = torch.tensor([[(5 * (7 * i + 3 * j + i * j * j) + j + 1) % vocab for j in range(block)]
                            for i in range(rows)])
    return tokens, targets


def loss_of(model, block, vocab):
    model.eval()
    tokens, targets = fixed_batch(block, vocab)
    with torch.no_grad():
        logits = model(tokens)
        return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)).item()


def save_safetensors(tensors, path):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    data = raw[8 + length:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[entry["dtype"]]) if end > begin else \
            torch.empty(0, dtype=DTYPES[entry["dtype"]])
        out[name] = flat.reshape(entry["shape"]).clone()
    return out


def make(args):
    n_layer, n_head, n_embd, block, vocab = (int(a) for a in args[:5])
    return GPT(n_layer, n_head, n_embd, block, vocab, bias=args[5] == "1"), block, vocab


def compare(path_a, path_b, tolerance):
    a, b = load_safetensors(path_a), load_safetensors(path_b)
    if sorted(a) != sorted(b):
        raise SystemExit("gpt_interop.py: %s and %s hold different names: %s" % (path_a, path_b,
                                                                                 sorted(set(a) ^ set(b))))
    worst, where = 0.0, ""
    for name in sorted(a):
        if a[name].shape != b[name].shape:
            raise SystemExit("gpt_interop.py: '%s' is %s in %s, %s in %s" % (name, list(a[name].shape), path_a,
                                                                            list(b[name].shape), path_b))
        diff = (a[name].double() - b[name].double()).abs().max().item() if a[name].numel() else 0.0
        if diff >= worst:
            worst, where = diff, name
    print("max abs difference %.3g (%s)" % (worst, where))
    return 0 if worst <= tolerance else 1


def main(argv):
    if argv[0] == "compare":
        raise SystemExit(compare(argv[1], argv[2], float(argv[3])))
    if argv[0] == "save":
        torch.manual_seed(3)
        model, block, vocab = make(argv[2:])
        save_safetensors(dict(model.named_parameters()), argv[1])
    elif argv[0] == "loss":
        model, block, vocab = make(argv[3:])
        prefix, _, suffix = ("" if argv[2] == "-" else argv[2]).partition("*")
        tensors = {k[len(prefix):len(k) - len(suffix)]: v for k, v in load_safetensors(argv[1]).items()
                   if k.startswith(prefix) and k.endswith(suffix)}
        model.load_state_dict(tensors, strict=True)
    else:
        raise SystemExit("gpt_interop.py: unknown command " + argv[0])
    print("loss %.9g" % loss_of(model, block, vocab))


if __name__ == "__main__":
    main(sys.argv[1:])
