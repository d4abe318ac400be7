#!/usr/bin/env python3
"""House size rules (STYLE.md): no file over 450 lines and no function body over 80 lines in src/,
tools/, include/ and examples/. Functions are found by brace structure (comments and strings skipped):
a top-level block whose header has a parameter list and is not a namespace, class, enum or control
statement. Prints each offender as path:line and exits 1 when there is any."""
import pathlib
import re
import sys

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80
SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b")
CONTROL = re.compile(r"^\s*(if|for|while|switch|else|do|try|catch|return)\b")


def strip_comments_and_strings(text):
    """The text with comments, string and char literals blanked (newlines kept for line numbers)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(text):
    """(line, length) of every function body longer than MAX_FUNCTION_LINES."""
    code = strip_comments_and_strings(text)
    stack, header_start, found, line = [], 0, [], 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c in ";}":
            if c == "}" and stack:
                kind, start = stack.pop()
                if kind == "function" and line - start + 1 > MAX_FUNCTION_LINES:
                    found.append((start, line - start + 1))
            header_start = i + 1
        elif c == "{":
            header = " ".join(code[header_start:i].split())
            header = re.sub(r"^\s*#.*$", "", header)
            inside_function = any(kind in ("function", "inner") for kind, _ in stack)
            if inside_function:
                kind = "inner"
            elif SCOPE.search(header) and "(" not in header.split("{")[0].split(SCOPE.search(header).group(0))[0]:
                kind = "scope"
            elif ")" in header and not CONTROL.match(header) and not header.rstrip().endswith("="):
                kind = "function"
            else:
                kind = "other"
            stack.append((kind, line))
            header_start = i + 1
    return found


def main(root):
    offenders = []
    for folder in ("src", "tools", "include", "examples"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".h", ".cpp"):
                continue
            text = path.read_text()
            lines = text.count("\n")
            rel = path.relative_to(root)
            if lines > MAX_FILE_LINES:
                offenders.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES})")
            for start, length in long_functions(text):
                offenders.append(f"{rel}:{start}: a function of {length} lines (at most {MAX_FUNCTION_LINES})")
    for o in offenders:
        print(o)
    if not offenders:
        print(f"size rules hold: files <= {MAX_FILE_LINES} lines, functions <= {MAX_FUNCTION_LINES} lines")
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
