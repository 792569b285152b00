"""Small safetensors reader/writer for making test fixtures (Python standard library only)."""
import json
import struct


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} in header order."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name != "__metadata__":
            b, e = info["data_offsets"]
            out[name] = (info["dtype"], info["shape"], data[b:e])
    return out


def f32_values(raw):
    return struct.unpack("<%df" % (len(raw) // 4), raw)


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


def write_safetensors(path, entries, metadata=None):
    """entries: list of (name, dtype, shape, float values). Returns the data size."""
    header, blobs, off = {"__metadata__": metadata or {"format": "pt"}}, [], 0
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


def write_index(path, weight_map, total):
    with open(path, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f,
                  indent=2, sort_keys=True)
