#!/usr/bin/env python3
"""Make tests/data/golden/noise_lowp/expected.safetensors (small) from the shared golden set.

Golden noise_lowp/ (README §8) holds torch.randn(shape, generator=manual_seed(seed), dtype=bf16/fp16)
for five cases; c4 ([1,13,16,60,90], 2.2 MB per dtype) is kept as head 4096 / mid 1000 (at n/2) /
tail 4096 values plus a 64-bit FNV-1a hash of all its raw bytes (metadata "c4.bf16.fnv1a64"), so the
test still checks every bit. The bf16 end-to-end runs (README §9) contribute only
user.initial_latents (F32, [1,3,4,6,8]) as "e2e_2b.user.initial_latents" / "e2e_5b...".
case.json is copied unchanged. Run from the repository root:
  python3 tests/data/golden/noise_lowp/make_fixture.py [/work/shared/golden]
"""
import json
import os
import shutil
import struct
import sys

GOLDEN = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/golden"
OUT = "tests/data/golden/noise_lowp"
BIG = 100000     # tensors with more values than this are stored as head/mid/tail + hash
HEAD, MID = 4096, 1000


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def fnv1a64(b):
    h = 0xcbf29ce484222325
    for byte in b:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def main():
    entries, meta = [], {"source": "golden noise_lowp/expected.safetensors, e2e_{2b,5b}/expected_bf16.safetensors"}
    for name, (dtype, shape, raw) in read(os.path.join(GOLDEN, "noise_lowp", "expected.safetensors")).items():
        n = len(raw) // 2
        if n <= BIG:
            entries.append((name, dtype, shape, raw))
            continue
        meta[name + ".fnv1a64"] = fnv1a64(raw)
        mid = n // 2
        entries.append((name + ".head", dtype, [HEAD], raw[:2 * HEAD]))
        entries.append((name + ".mid", dtype, [MID], raw[2 * mid:2 * (mid + MID)]))
        entries.append((name + ".tail", dtype, [HEAD], raw[2 * (n - HEAD):]))
    for case in ("e2e_2b", "e2e_5b"):
        dtype, shape, raw = read(os.path.join(GOLDEN, case, "expected_bf16.safetensors"))["user.initial_latents"]
        entries.append((case + ".user.initial_latents", dtype, shape, raw))
    header, off = {"__metadata__": meta}, 0
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(OUT, "expected.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(e[3] for e in entries))
    shutil.copy(os.path.join(GOLDEN, "noise_lowp", "case.json"), os.path.join(OUT, "case.json"))
    os.chmod(os.path.join(OUT, "case.json"), 0o644)


if __name__ == "__main__":
    main()
