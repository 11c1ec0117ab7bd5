#!/usr/bin/env python3
"""The size rule of the shipped crates: no source file over 600 lines, no function over 120.

Lines are raw lines (comments and blank lines count: they are read too). A file counts whole,
its inline test module included; unit-test files (`tests.rs`, `tests/*.rs` inside a crate's
`src/`) and what sits under `#[cfg(test)]` are exempt from the function rule, files named
`tests.rs` from both. An exception is a comment on the line before the function, or in a
file's first ten lines for the file rule:

    // size: allowed (a long match on record kinds: one arm a kind, read in one place)

that says why in its parentheses. Prints every breach with its size and exits 1 if any.

    scripts/size_check.py [--list N]   # --list: also the N longest functions, for a review
"""

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The shipped crates: what a user installs (the wheel's programs and library, the crates they
# are built from). tests/, fuzz/, bench/ and examples are not shipped.
SHIPPED = ["format", "filewrite", "preload/core", "preload", "collector", "report", "tools", "trace", "wheel"]
MAX_FILE_LINES = 600
MAX_FN_LINES = 120
ALLOW = re.compile(r"//\s*size: allowed \(.+\)")
FN_START = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
    r"(?:extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)"
)


def code_mask(text):
    """The text with comments, strings and char literals blanked (newlines kept), so that
    braces can be counted."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif m := re.match(r'b?r(#*)"', text[i : i + 300]):
            if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
                i += 1
                continue
            close = '"' + m.group(1)
            j = text.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            blank(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}', '{') or a lifetime ('a, 'static).
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", text[i : i + 12])
            if m:
                blank(i, i + m.end())
                i += m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def test_ranges(lines):
    """Line ranges (0-based, inclusive) of items under `#[cfg(test)]`."""
    ranges = []
    for idx, line in enumerate(lines):
        if line.strip().startswith("#[cfg(test)]"):
            end, _ = item_end(lines, idx + 1)
            if end is not None:
                ranges.append((idx, end))
    return ranges


def item_end(lines, start):
    """(last line, has a body) of the item that starts at or after `start`: its closing brace,
    or the line of the `;` that ends it first (outside parentheses and brackets, so that a
    `[u8; 64]` in a signature does not end a function)."""
    depth, opened = 0, False
    for idx in range(start, len(lines)):
        for ch in lines[idx]:
            if ch in "([{":
                depth += 1
                opened |= ch == "{"
            elif ch in ")]}":
                depth -= 1
                if ch == "}" and opened and depth == 0:
                    return idx, True
            elif ch == ";" and not opened and depth == 0:
                return idx, False
    return None, False


def functions(lines):
    """(name, first line, last line) of every function with a body."""
    found = []
    for idx, line in enumerate(lines):
        m = FN_START.match(line)
        if m:
            end, body = item_end(lines, idx)
            if body:
                found.append((m.group(1), idx, end))
    return found


def allowed(raw_lines, idx):
    """An allowance comment on the lines just above `idx` (above its attributes too)."""
    j = idx - 1
    while j >= 0 and raw_lines[j].strip().startswith(("#[", "///", "//")):
        if ALLOW.search(raw_lines[j]):
            return True
        j -= 1
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", type=int, default=0, help="also print the N longest functions")
    args = parser.parse_args()
    breaches, all_fns = [], []
    for crate in SHIPPED:
        src = ROOT / crate / "src"
        if not src.is_dir():
            continue
        for path in sorted(src.rglob("*.rs")):
            rel = path.relative_to(ROOT)
            raw = path.read_text()
            raw_lines = raw.split("\n")
            if raw.endswith("\n"):
                raw_lines.pop()
            is_test_file = path.name == "tests.rs" or "tests" in path.relative_to(src).parts[:-1]
            if is_test_file:
                continue
            if len(raw_lines) > MAX_FILE_LINES and not any(ALLOW.search(x) for x in raw_lines[:10]):
                breaches.append(f"{rel}: {len(raw_lines)} lines (at most {MAX_FILE_LINES})")
            masked = code_mask(raw).split("\n")
            tests = test_ranges(masked)
            for name, first, last in functions(masked):
                if any(a <= first <= b for a, b in tests):
                    continue
                size = last - first + 1
                all_fns.append((size, f"{rel}:{first + 1} {name}"))
                if size > MAX_FN_LINES and not allowed(raw_lines, first):
                    breaches.append(f"{rel}:{first + 1}: fn {name} is {size} lines (at most {MAX_FN_LINES})")
    for size, where in sorted(all_fns, reverse=True)[: args.list]:
        print(f"{size:5} {where}")
    for line in breaches:
        print(f"size: {line}", file=sys.stderr)
    if breaches:
        print(f"size: {len(breaches)} breach(es) of the size rule (scripts/size_check.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
