#!/usr/bin/env python3
"""Make the stage-1 test fixtures from the golden tiny T5 (Python standard library only).

  t5_bf16_sharded/text_encoder/      the golden weights as a 2-shard BF16 checkpoint with a
                                     model.safetensors.index.json, the embedding stored as
                                     'encoder.embed_tokens.weight' (the other T5 naming) and
                                     encoder.final_layer_norm.weight as F16
  t5_bf16_rounded_f32/text_encoder/  the same rounded values stored as one F32 file, so the
                                     sharded/bf16 path can be checked exactly

Run from the repository root: python3 tests/data/stage1/make_sharded_fixture.py
"""
import json
import os
import shutil
import struct

SRC = "tests/data/golden/t5/model/text_encoder"
OUT = "tests/data/stage1"


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        b, e = info["data_offsets"]
        vals = struct.unpack("<%df" % ((e - b) // 4), data[b:e])
        tensors[name] = (info["shape"], vals)
    return tensors


def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (as torch .to(torch.bfloat16))."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return (u >> 16) | 0x40
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(x):
    return struct.unpack("<f", struct.pack("<I", bf16_bits(x) << 16))[0]


def f16_value(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def encode(dtype, vals):
    if dtype == "BF16":
        return struct.pack("<%dH" % len(vals), *[bf16_bits(v) for v in vals])
    if dtype == "F16":
        return struct.pack("<%de" % len(vals), *vals)
    return struct.pack("<%df" % len(vals), *vals)


def write_safetensors(path, entries):
    """entries: list of (name, dtype, shape, values)."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dtype, shape, vals in entries:
        blob = encode(dtype, vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return off


def main():
    src = read_safetensors(os.path.join(SRC, "model.safetensors"))
    sharded = os.path.join(OUT, "t5_bf16_sharded", "text_encoder")
    rounded = os.path.join(OUT, "t5_bf16_rounded_f32", "text_encoder")
    for d in (sharded, rounded):
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(SRC, "config.json"), d)

    shards = {1: [], 2: []}
    flat = []
    for name in sorted(src):
        shape, vals = src[name]
        dtype = "F16" if name == "encoder.final_layer_norm.weight" else "BF16"
        vals = [f16_value(v) if dtype == "F16" else bf16_value(v) for v in vals]
        out_name = "encoder.embed_tokens.weight" if name == "shared.weight" else name
        shard = 2 if name.startswith(("encoder.block.1.", "encoder.final_layer_norm")) else 1
        shards[shard].append((out_name, dtype, shape, vals))
        flat.append((name, "F32", shape, vals))

    weight_map, total = {}, 0
    for k, entries in shards.items():
        fname = "model-%05d-of-00002.safetensors" % k
        total += write_safetensors(os.path.join(sharded, fname), entries)
        for e in entries:
            weight_map[e[0]] = fname
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    write_safetensors(os.path.join(rounded, "model.safetensors"), flat)


if __name__ == "__main__":
    main()
