#!/usr/bin/python3
# PyTorch's own torch.nn.SyncBatchNorm as the reference for cohort::SyncBatchNorm (tests/multiproc/
# sync_batchnorm_test.cpp). The C++ ranks save their inputs, output gradients and initial state
# (data.pt) and their results (cpp_<rank>.pt) in --dir; this runs the same steps under
# torch.nn.SyncBatchNorm on --world-size Gloo processes and compares every tensor. PyTorch runs
# SyncBatchNorm on GPUs only: its five CUDA-only kernels get CPU implementations here (torch.library,
# from their CUDA definitions) and the module's device check is removed from its forward (by AST, the
# rest of the forward and the whole autograd function stay PyTorch's). As a check of those kernels, the
# results are also compared with nn.BatchNorm on the ranks' batches concatenated (PyTorch's CPU kernels).
# Prints "max-diff: X" (against SyncBatchNorm) and "max-diff-batchnorm: X" (|a - b| / max(1, |b|): absolute
# below 1, relative above, since batch sums exceed one float's rounding); exits 0 when both
# are below --tolerance, 1 when not, 2 when torch or the files are missing.
import argparse
import ast
import datetime
import inspect
import os
import faulthandler
import sys
import textwrap

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.modules.batchnorm as batchnorm
except ImportError as error:
    print(f"syncbn_reference.py: cannot import torch ({error})", file=sys.stderr)
    sys.exit(2)


def channel_view(values, like):
    return values.view([1, -1] + [1] * (like.dim() - 2))


def reduced_dims(x):
    return [0] + list(range(2, x.dim()))


# CPU versions of the kernels torch.nn.modules._functions.SyncBatchNorm calls (CUDA-only in PyTorch),
# written from aten/src/ATen/native/cuda/Normalization.cuh.
def batch_norm_stats(x, eps):
    var, mean = torch.var_mean(x, reduced_dims(x), unbiased=False)
    return mean, (var + eps).rsqrt()


def batch_norm_gather_stats_with_counts(x, mean_all, invstd_all, running_mean, running_var, momentum, eps, counts):
    channels = mean_all.shape[1]
    avg = torch.zeros(channels, dtype=mean_all.dtype)
    var_n = torch.zeros(channels, dtype=mean_all.dtype)
    n = 0.0
    for j in range(mean_all.shape[0]):
        count = float(counts[j])
        v = (invstd_all[j].reciprocal().square() - eps) * count
        factor = 1.0 / (n + count)
        var_n += v + (avg - mean_all[j]).square() * (n * count * factor)
        avg = avg * (n * factor) + mean_all[j] * (count * factor)
        n += count
    if running_mean is not None:
        running_mean.copy_(running_mean * (1 - momentum) + avg * momentum)
    if running_var is not None:
        running_var.copy_(running_var * (1 - momentum) + (var_n / (n - 1)) * momentum)
    return avg, (var_n / n + eps).rsqrt()


def batch_norm_elemt(x, weight, bias, mean, invstd, eps):
    out = (x - channel_view(mean, x)) * channel_view(invstd, x)
    if weight is not None:
        out = out * channel_view(weight, x)
    if bias is not None:
        out = out + channel_view(bias, x)
    return out


def batch_norm_backward_reduce(dy, x, mean, invstd, weight, input_g, weight_g, bias_g):
    dims = reduced_dims(x)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (x - channel_view(mean, x))).sum(dims)
    return sum_dy, sum_dy_xmu, sum_dy_xmu * invstd, sum_dy


def batch_norm_backward_elemt(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    norm = 1.0 / float(count.sum())
    proj_scale = sum_dy_xmu * norm * invstd * invstd
    grad_scale = invstd * weight if weight is not None else invstd
    xmu = x - channel_view(mean, x)
    return (dy - channel_view(sum_dy * norm, x) - xmu * channel_view(proj_scale, x)) * channel_view(grad_scale, x)


KERNELS = [batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce,
           batch_norm_backward_elemt]


class DropDeviceCheck(ast.NodeTransformer):
    """Removes the `if <not on GPU>: raise ValueError("SyncBatchNorm expected input tensor to be on GPU ...")`."""
    removed = 0

    def visit_If(self, node):
        self.generic_visit(node)
        text = ast.dump(node.body[0]) if len(node.body) == 1 else ""
        if isinstance(node.body[0], ast.Raise) and "expected input tensor to be on GPU" in text:
            DropDeviceCheck.removed += 1
            return ast.Pass()
        return node


def cpu_sync_batchnorm_class():
    tree = ast.parse(textwrap.dedent(inspect.getsource(batchnorm.SyncBatchNorm.forward)))
    tree = ast.fix_missing_locations(DropDeviceCheck().visit(tree))
    if DropDeviceCheck.removed != 1:
        print(f"syncbn_reference.py: found {DropDeviceCheck.removed} device checks in torch "
              f"{torch.__version__}'s SyncBatchNorm.forward, expected 1", file=sys.stderr)
        sys.exit(2)
    scope = {}
    exec(compile(tree, "<SyncBatchNorm.forward>", "exec"), dict(vars(batchnorm)), scope)
    return type("CpuSyncBatchNorm", (nn.SyncBatchNorm,), {"forward": scope["forward"]})


def load(path):
    if not os.path.exists(path):
        print(f"syncbn_reference.py: {path} not found (the C++ ranks write it)", file=sys.stderr)
        sys.exit(2)
    return torch.load(path, weights_only=False)


def make_module(cls, data, args):
    channels = data["running_mean"].numel()
    momentum = None if args.momentum == "none" else float(args.momentum)
    module = cls(channels, eps=args.eps, momentum=momentum, affine=args.affine, track_running_stats=args.track)
    module.to(data["xe"].dtype)
    with torch.no_grad():
        if args.affine:
            module.weight.copy_(data["weight"])
            module.bias.copy_(data["bias"])
        if args.track:
            module.running_mean.copy_(data["running_mean"])
            module.running_var.copy_(data["running_var"])
    return module


def run_steps(module, data, rank, args):
    """The C++ ranks' steps: forward, backward of the saved output gradient, then one eval forward."""
    out = {}
    for step in range(args.steps):
        x = data[f"x{rank}_{step}"].clone().requires_grad_(True)
        if module.weight is not None:
            module.weight.grad, module.bias.grad = None, None
        y = module(x)
        y.backward(data[f"g{rank}_{step}"])
        out[f"y{rank}_{step}"] = y.detach()
        out[f"dx{rank}_{step}"] = x.grad if x.grad is not None else torch.zeros_like(x)
        if module.weight is not None:
            for name, p in (("dw", module.weight), ("db", module.bias)):
                out[f"{name}{rank}_{step}"] = p.grad if p.grad is not None else torch.zeros_like(p)
    if args.track:
        out[f"running_mean{rank}"] = module.running_mean.clone()
        out[f"running_var{rank}"] = module.running_var.clone()
    module.eval()
    with torch.no_grad():
        out[f"ye{rank}"] = module(data["xe"])
    return out


def worker(rank, args):
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where, before the test's timeout
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if not torch.cuda.is_available():  # 1.13 asks whether a CUDA graph is being captured: none can be
        torch.cuda.is_current_stream_capturing = lambda: False
    lib = torch.library.Library("aten", "IMPL")  # kept alive while the rank runs
    for kernel in KERNELS:
        lib.impl(kernel.__name__, kernel, "CPU")
    dist.init_process_group("gloo", init_method="file://" + os.path.join(args.dir, "rendezvous"), rank=rank,
                            world_size=args.world_size, timeout=datetime.timedelta(seconds=60))
    data = load(os.path.join(args.dir, "data.pt"))
    module = make_module(cpu_sync_batchnorm_class(), data, args)
    torch.save(run_steps(module, data, rank, args), os.path.join(args.dir, f"python_{rank}.pt"))
    dist.destroy_process_group()


def batchnorm_on_concatenated(data, args):
    """nn.BatchNorm on every rank's rows at once: the values SyncBatchNorm must reproduce."""
    module = make_module(nn.BatchNorm1d if data["xe"].dim() <= 3 else nn.BatchNorm2d if data["xe"].dim() == 4
                         else nn.BatchNorm3d, data, args)
    ranks = range(args.world_size)
    out = {}
    for step in range(args.steps):
        xs = [data[f"x{r}_{step}"] for r in ranks]
        x = torch.cat(xs).requires_grad_(True)
        if module.weight is not None:
            module.weight.grad, module.bias.grad = None, None
        y = module(x)
        y.backward(torch.cat([data[f"g{r}_{step}"] for r in ranks]))
        sizes = [t.shape[0] for t in xs]
        for r, (ys, dxs) in enumerate(zip(y.detach().split(sizes), x.grad.split(sizes))):
            out[f"y{r}_{step}"], out[f"dx{r}_{step}"] = ys, dxs
        if module.weight is not None:  # SyncBatchNorm's are each rank's share: compared summed
            out[f"dw_{step}"], out[f"db_{step}"] = module.weight.grad, module.bias.grad
    module.eval()
    with torch.no_grad():
        ye = module(data["xe"])
    for r in ranks:
        out[f"ye{r}"] = ye
        if args.track:
            out[f"running_mean{r}"], out[f"running_var{r}"] = module.running_mean, module.running_var
    return out


def summed_weight_grads(results, args):
    out = dict(results)
    for step in range(args.steps):
        for name in ("dw", "db"):
            keys = [f"{name}{r}_{step}" for r in range(args.world_size)]
            if keys[0] in results:
                out[f"{name}_{step}"] = sum(results[k] for k in keys)
    return out


def compare(reference, cpp, label):
    worst, where = 0.0, None
    for name, expected in reference.items():
        if name not in cpp:
            print(f"{label}: the C++ results have no {name}")
            return float("inf")
        if tuple(cpp[name].shape) != tuple(expected.shape):
            print(f"{label}: {name} has shape {tuple(cpp[name].shape)} in C++, {tuple(expected.shape)} here")
            return float("inf")
        # Absolute below 1, relative above: sums over a batch are larger than one float's rounding.
        error = (cpp[name].double() - expected.double()).abs() / expected.double().abs().clamp(min=1)
        d = error.max().item() if expected.numel() else 0.0
        if d > worst or where is None:
            worst, where = d, name
    print(f"{label}: worst {where}")
    return worst


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--eps", type=float, default=1e-5)
    parser.add_argument("--momentum", default="0.1", help="a number, or none for the cumulative average")
    parser.add_argument("--affine", type=int, default=1)
    parser.add_argument("--track", type=int, default=1)
    parser.add_argument("--tolerance", type=float, default=1e-6)
    args = parser.parse_args()
    args.affine, args.track = bool(args.affine), bool(args.track)

    print(f"torch {torch.__version__}")
    mp.start_processes(worker, args=(args,), nprocs=args.world_size, join=True, start_method="fork")

    data = load(os.path.join(args.dir, "data.pt"))
    cpp, python = {}, {}
    for r in range(args.world_size):
        cpp.update(load(os.path.join(args.dir, f"cpp_{r}.pt")))
        python.update(load(os.path.join(args.dir, f"python_{r}.pt")))
    diff = compare(python, cpp, "SyncBatchNorm")
    diff_bn = compare(batchnorm_on_concatenated(data, args), summed_weight_grads(cpp, args), "BatchNorm")
    print(f"max-diff: {diff:.9g}")
    print(f"max-diff-batchnorm: {diff_bn:.9g}")
    if max(diff, diff_bn) >= args.tolerance:
        print(f"FAIL: cohort::SyncBatchNorm differs by {max(diff, diff_bn):.9g} >= {args.tolerance:g}")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
