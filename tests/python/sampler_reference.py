#!/usr/bin/python3
# Prints the indices of PyTorch's own torch.utils.data.distributed.DistributedSampler for a grid of
# settings, one line per (setting, rank), so tests/sampler_test.cpp can check cohort's sampler index
# for index. Run with Debian's /usr/bin/python3 (python3-torch: the same LibTorch 1.13 as cohort).
# Output: "torch <version>", then "case N REPLICAS RANK SHUFFLE SEED DROP_LAST EPOCH COUNT : i ...",
# then "end <number of cases>". Exits 2 with a message when torch cannot be imported.
import sys

try:
    import torch
    from torch.utils.data.distributed import DistributedSampler
except ImportError as error:
    print(f"sampler_reference.py: cannot import torch ({error}); install the Debian package "
          f"python3-torch and run with /usr/bin/python3", file=sys.stderr)
    sys.exit(2)


class Sized:
    """A stand-in dataset: DistributedSampler only calls len()."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def cases():
    for n in (0, 1, 2, 7, 10, 11, 100, 1001):
        for replicas in (1, 2, 3, 4, 7):
            for shuffle in (False, True):
                for seed in (0, 1234):
                    for drop_last in (False, True):
                        for epoch in (0, 1, 3):
                            yield n, replicas, shuffle, seed, drop_last, epoch
    # A negative seed (wraps to uint64 in manual_seed) and the Fashion-MNIST training set size.
    for epoch in (0, 5):
        yield 50, 3, True, -7, False, epoch
    for epoch in (0, 1):
        yield 60000, 4, True, 0, False, epoch


def main():
    print(f"torch {torch.__version__}")
    count = 0
    for n, replicas, shuffle, seed, drop_last, epoch in cases():
        for rank in range(replicas):
            sampler = DistributedSampler(Sized(n), num_replicas=replicas, rank=rank,
                                         shuffle=shuffle, seed=seed, drop_last=drop_last)
            sampler.set_epoch(epoch)
            indices = list(sampler)
            assert len(indices) == len(sampler)
            print(f"case {n} {replicas} {rank} {int(shuffle)} {seed} {int(drop_last)} {epoch} "
                  f"{len(indices)} :", *indices)
            count += 1
    print(f"end {count}")


if __name__ == "__main__":
    main()
