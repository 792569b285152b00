#!/usr/bin/env python3
"""Compare our prompt cleaning with the real ftfy 6.3.1, html and regex, input by input.

    FUZZ_PRINT=1 build-fuzz/fuzz_prompt_clean -runs=0 DIR 2>/dev/null \\
        | PYTHONPATH=/path/to/python-ftfy-6.3.1 python3 scripts/ftfy_diff.py

Reads the lines fuzz/fuzz_prompt_clean.c prints under FUZZ_PRINT (hex of: the input bytes, then
our prompt_clean, ftfy.fix_encoding, badness.is_bad, html.unescape of the input read as
bytes.decode("utf-8", "replace")) and recomputes each with the Python originals (prompt_clean as
diffusers' WanPipeline: ftfy.fix_text, html.unescape twice, strip, regex \\s+ -> " ", strip).
Prints the first differences and a count; exits 1 if any output differs. Needs ftfy (and its
wcwidth) and the regex module; nothing else.
"""
import html
import sys

import ftfy
import regex
from ftfy import badness

assert ftfy.__version__ == "6.3.1", ftfy.__version__
NAMES = ("prompt_clean", "fix_encoding", "is_bad", "html.unescape")


def prompt_clean(text):
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return regex.sub(r"\s+", " ", text).strip()


def unhex(h):
    return b"" if h == "-" else bytes.fromhex(h)


def hx(s):
    b = s.encode("utf-8")
    return b.hex() if b else "-"


seen, differ = set(), 0
for line in sys.stdin:
    f = line.split()
    if len(f) != 5 or f[0] in seen:   # libFuzzer runs some inputs more than once
        continue
    seen.add(f[0])
    t = unhex(f[0]).decode("utf-8", "replace")
    want = (hx(prompt_clean(t)), hx(ftfy.fix_encoding(t)), str(int(badness.is_bad(t))), hx(html.unescape(t)))
    got = tuple(f[1:])
    if want != got:
        differ += 1
        if differ <= 10:
            which = [NAMES[i] for i in range(4) if want[i] != got[i]]
            print(f"differs ({', '.join(which)}): input {unhex(f[0])!r}")
print(f"ftfy_diff: {len(seen)} inputs, {differ} with a different output")
sys.exit(1 if differ or not seen else 0)
