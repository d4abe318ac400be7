#!/usr/bin/env python3
"""Each public header (include/cohort/*.h) opens with a few lines on what it is; this check holds those
lines to the code: every name they give as cohort's must exist. Checked are `cohort::` names
(cohort::Trainer, cohort::hvd::elastic::State, cohort::init()), a `Type::member` of a cohort type
(World::node_mesh, EngineOptions::unit_policy) and every other CamelCase word (ProgressBarCallback),
unless it is on the list of other projects' names below (PyTorch's, Lightning's, Horovod's: the
headers say which API they mirror). A name exists when a header in include/ or src/ declares it
(class, struct, enum, using, namespace, a function or a member). Prints each unknown name as
path:line and exits 1."""
import pathlib
import re
import sys

# Other projects' names that headers cite as what cohort mirrors; never cohort's own.
FOREIGN = {
    "DataParallel", "DistributedDataParallel", "DistributedSampler", "DeviceMesh", "LightningDataModule",
    "LightningModule", "TorchState", "SyncBatchNorm", "DistributedOptimizer", "TCPStore", "BatchNorm1d",
    "BatchNorm2d", "BatchNorm3d", "ProcessGroup", "ProcessGroupGloo", "ProcessGroupNCCL", "PyTorch",
    "LibTorch", "DeepSpeed", "TensorFlow", "TensorBoard", "CSVLogger", "MirroredStrategy", "Joinable",
    "CrossEntropyLoss", "AdamW", "OpenMPI", "PowerSGD", "NVMe", "CUDA", "NCCL", "MVAPICH", "CIFAR",
    "MNIST", "JSON", "CRC32C", "TFRecord", "ZeRO", "GPipe", "FSDP2", "ETA", "Event", "Summary",
}
CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b")
QUALIFIED = re.compile(r"\bcohort(?:::[A-Za-z_]\w*)+")
MEMBER = re.compile(r"\b([A-Z][A-Za-z0-9]*)::([a-z_]\w*)")


def opening_comment(path):
    """The header's first comment block: its leading `//` lines, with their line numbers."""
    lines = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.startswith("//"):
            break
        lines.append((number, line[2:]))
    return lines


def declared_names(root):
    """Every name a header of include/ or src/ declares, and every identifier of a header (members)."""
    types, identifiers = set(), set()
    decl = re.compile(r"\b(?:class|struct|enum(?:\s+class)?|using|TORCH_MODULE\()\s*([A-Za-z_]\w*)")
    for header in list((root / "include").rglob("*.h")) + list((root / "src").rglob("*.h")):
        code = "\n".join(l for l in header.read_text(encoding="utf-8").splitlines() if not l.lstrip().startswith("//"))
        types.update(decl.findall(code))
        for spaces in re.findall(r"\bnamespace\s+([\w:]+)", code):  # namespace cohort::hvd::elastic
            types.update(spaces.split("::"))
        types.update(re.findall(r"\b([A-Za-z_]\w*)\s*\(", code))  # functions, and constructors
        identifiers.update(re.findall(r"\b[A-Za-z_]\w*\b", code))
    return types, identifiers


def main(root):
    root = pathlib.Path(root)
    types, identifiers = declared_names(root)
    failures, checked = [], 0
    for header in sorted((root / "include" / "cohort").glob("*.h")):
        rel = header.relative_to(root)
        for number, text in opening_comment(header):
            text = re.sub(r"\b\S+\.(?:h|md|txt|cpp|json|bin)\b", " ", text)  # file names are not types
            text = re.sub(r"\b(?:torch|c10|std|at)(?:::\w+)+", " ", text)  # LibTorch's and the library's
            names = []
            for q in QUALIFIED.findall(text):
                names.extend((part, "cohort name") for part in q.split("::")[1:])
            if text.startswith("   "):
                # An example's code: its own types are the user's; only its cohort:: names are checked.
                text = QUALIFIED.sub(" ", text)
                text = ""
            for owner, member in MEMBER.findall(text):
                if owner not in FOREIGN and not owner.startswith("Py"):
                    names.append((owner, "type"))
                    names.append((member, f"member of {owner}"))
            for word in CAMEL.findall(text):
                if word not in FOREIGN:
                    names.append((word, "type"))
            for name, what in names:
                checked += 1
                known = name in types or (what.startswith("member") and name in identifiers)
                if not known:
                    failures.append(f"{rel}:{number}: its opening comment names {what} '{name}', which no header declares")
    for failure in failures:
        print(failure)
    if failures:
        print(f"FAIL: {len(failures)} names in the opening comments of include/cohort/*.h do not exist")
        return 1
    print(f"header comments: {checked} names in the opening comments of include/cohort/*.h all exist")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]))
