#!/usr/bin/env python3
"""Every error raised in src/ says its kind (docs/errors.md): no untyped COHORT_CHECK (use
COHORT_CHECK_KIND), no `throw Error(...)` without an ErrorKind, no `throw std::runtime_error`-style
exception of the standard library, so a caller deciding whether to
retry reads kind() and never has to parse text. Prints each offender as path:line and exits 1."""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from size_check import strip_comments_and_strings  # noqa: E402

SOURCES = ("*.cpp", "*.h")
UNTYPED_CHECK = re.compile(r"\bCOHORT_CHECK\s*\(")
THROW = re.compile(r"\bthrow\s+(::)?(cohort::)?(Error|std::[A-Za-z_:]+)\s*\(")
# The definitions themselves: the macros and the class.
EXEMPT = {"src/core/check.h", "src/core/error.cpp"}


def has_second_argument(text, open_paren):
    """Whether the call whose `(` is at `open_paren` passes more than one argument (a kind)."""
    depth = 0
    for i in range(open_paren, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return False
        elif c == "," and depth == 1:
            return True
    return False


def offenders(root):
    for pattern in SOURCES:
        for path in sorted((root / "src").rglob(pattern)):
            relative = path.relative_to(root).as_posix()
            if relative in EXEMPT:
                continue
            text = strip_comments_and_strings(path.read_text(encoding="utf-8", errors="replace"))
            for match in UNTYPED_CHECK.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                yield f"{relative}:{line}: COHORT_CHECK without a kind; use COHORT_CHECK_KIND(kind, ...)"
            for match in THROW.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                what = match.group(3)
                if what.startswith("std::"):
                    yield f"{relative}:{line}: throws {what}; raise a cohort::Error of a kind"
                elif not has_second_argument(text, match.end() - 1):
                    yield f"{relative}:{line}: throws cohort::Error without an ErrorKind"


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    found = list(offenders(root))
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} untyped error(s) in src/ (docs/errors.md lists the kinds)")
        return 1
    print("every error raised in src/ has a kind")
    return 0


if __name__ == "__main__":
    sys.exit(main())
