#!/usr/bin/env python3
"""One socket module (docs/design/architecture.md, "Sockets"): no file in src/ or tools/ other than
src/core/socket*.cpp calls connect(2), accept(2)/accept4(2) or poll(2) itself; they use src/core/socket.h
(deadlines, descriptors that close themselves, errors naming host:port). A call is the libc name,
`::`-qualified or unqualified; member functions (`x.poll(`), other scopes (`hvd::poll(`) and
declarations (`bool poll(`) are not calls to libc. Prints each offender as path:line and exits 1."""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from size_check import strip_comments_and_strings  # noqa: E402

NAMES = re.compile(r"\b(connect|accept|accept4|poll)\s*\(")
MODULE = re.compile(r"^src/core/socket[a-z_]*\.cpp$")
SOURCES = ("*.cpp", "*.h", "*.hpp", "*.cc")


def is_libc_call(text, start):
    """Whether the name at `start` is a call of the libc function (not a member, scope or declaration)."""
    before = text[:start].rstrip()
    if before.endswith("::"):
        scope = before[:-2].rstrip()
        return not scope or not (scope[-1].isalnum() or scope[-1] in "_>")  # `::poll(`, not `Ctx::poll(`
    if before.endswith((".", "->")):
        return False  # a member function
    word = re.search(r"[A-Za-z_][A-Za-z0-9_]*$", before)
    if word:
        return word.group(0) in ("return", "co_return")  # `bool poll(`: a declaration
    return True


def offenders(root):
    for top in ("src", "tools"):
        for pattern in SOURCES:
            for path in sorted((root / top).rglob(pattern)):
                relative = path.relative_to(root).as_posix()
                if MODULE.match(relative):
                    continue
                text = strip_comments_and_strings(path.read_text(encoding="utf-8", errors="replace"))
                for match in NAMES.finditer(text):
                    if is_libc_call(text, match.start()):
                        line = text.count("\n", 0, match.start()) + 1
                        yield f"{relative}:{line}: calls {match.group(1)}() directly; use src/core/socket.h"


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    found = list(offenders(root))
    for line in found:
        print(line)
    if found:
        print(f"socket_calls_check: {len(found)} direct call(s) of connect/accept/poll outside src/core/socket*.cpp")
        return 1
    print("socket_calls_check: connect, accept and poll are called only in src/core/socket*.cpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
