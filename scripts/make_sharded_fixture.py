#!/usr/bin/env python3
"""Make a sharded BF16 copy of a single-file F32 safetensors checkpoint, in the layout real
diffusers/transformers checkpoints use: <stem>-0000K-of-0000N.safetensors + <stem>.safetensors.index.json.
Standard library only. Usage: make_sharded_fixture.py SRC.safetensors OUT_DIR STEM NUM_SHARDS"""
import json, os, struct, sys

def bf16_bytes(raw):
    out = bytearray(len(raw) // 2)
    for i in range(len(raw) // 4):
        (u,) = struct.unpack_from("<I", raw, 4 * i)
        if (u & 0x7F800000) == 0x7F800000 and (u & 0x7FFFFF):
            h = 0x7FC0
        else:
            h = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
        struct.pack_into("<H", out, 2 * i, h)
    return bytes(out)

def write_st(path, tensors, meta):
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for b in blobs:
            f.write(b)

def main():
    src, out_dir, stem, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with open(src, "rb") as f:
        buf = f.read()
    (hl,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8 : 8 + hl])
    base = 8 + hl
    names = sorted(k for k in header if k != "__metadata__")
    os.makedirs(out_dir, exist_ok=True)
    weight_map, total = {}, 0
    for k in range(n):
        part = names[k::n]
        fname = f"{stem}-{k + 1:05d}-of-{n:05d}.safetensors"
        tensors = {}
        for name in part:
            e = header[name]
            raw = buf[base + e["data_offsets"][0] : base + e["data_offsets"][1]]
            data = bf16_bytes(raw) if e["dtype"] == "F32" else raw
            tensors[name] = ("BF16" if e["dtype"] == "F32" else e["dtype"], e["shape"], data)
            weight_map[name] = fname
            total += len(data)
        write_st(os.path.join(out_dir, fname), tensors, {"format": "pt"})
    with open(os.path.join(out_dir, f"{stem}.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)

if __name__ == "__main__":
    main()
