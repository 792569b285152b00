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
    return write_safetensors_bytes(path, [(n, d, s, encode(d, v)) for n, d, s, v in entries], metadata)


def write_safetensors_bytes(path, entries, metadata=None):
    """entries: list of (name, dtype, shape, raw little-endian bytes). Returns the data size."""
    header, off = {"__metadata__": metadata or {"format": "pt"}}, 0
    for name, dtype, shape, blob in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, _, _, blob in entries:
            f.write(blob)
    return off


def cogvideox_transformer_layout(cfg):
    """The tensors of a CogVideoX transformer in the diffusers layout (sincos and rotary positions
    are computed, not stored; 1.5's learned positional embedding is not included) as
    (name, shape, scale, offset): random-weight fixtures fill each with offset + scale * U(-1, 1),
    scale ~ 1/sqrt(fan_in) so that activations stay O(1)."""
    heads, hd, layers = cfg["num_attention_heads"], cfg["attention_head_dim"], cfg["num_layers"]
    D, E, T = heads * hd, cfg["time_embed_dim"], cfg["text_embed_dim"]
    C, p = cfg["in_channels"], cfg["patch_size"]
    sD, sE = D ** -0.5, E ** -0.5
    out = []

    def add(name, shape, scale, offset=0.0):
        out.append((name, shape, scale, offset))

    add("patch_embed.proj.weight", [D, C, p, p], (C * p * p) ** -0.5); add("patch_embed.proj.bias", [D], 0.1)
    add("patch_embed.text_proj.weight", [D, T], T ** -0.5); add("patch_embed.text_proj.bias", [D], 0.1)
    add("time_embedding.linear_1.weight", [E, D], sD); add("time_embedding.linear_1.bias", [E], 0.1)
    add("time_embedding.linear_2.weight", [E, E], sE); add("time_embedding.linear_2.bias", [E], 0.1)
    for i in range(layers):
        b = "transformer_blocks.%d." % i
        for nn in ("norm1", "norm2"):
            add(b + nn + ".linear.weight", [6 * D, E], sE); add(b + nn + ".linear.bias", [6 * D], 0.1)
            add(b + nn + ".norm.weight", [D], 0.1, 1.0); add(b + nn + ".norm.bias", [D], 0.1)
        for k in ("attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0"):
            add(b + k + ".weight", [D, D], sD); add(b + k + ".bias", [D], 0.1)
        for k in ("norm_q", "norm_k"):
            add(b + "attn1." + k + ".weight", [hd], 0.1, 1.0); add(b + "attn1." + k + ".bias", [hd], 0.1)
        add(b + "ff.net.0.proj.weight", [4 * D, D], sD); add(b + "ff.net.0.proj.bias", [4 * D], 0.1)
        add(b + "ff.net.2.weight", [D, 4 * D], 0.5 * sD); add(b + "ff.net.2.bias", [D], 0.1)
    add("norm_final.weight", [D], 0.1, 1.0); add("norm_final.bias", [D], 0.1)
    add("norm_out.linear.weight", [2 * D, E], sE); add("norm_out.linear.bias", [2 * D], 0.1)
    add("norm_out.norm.weight", [D], 0.1, 1.0); add("norm_out.norm.bias", [D], 0.1)
    add("proj_out.weight", [p * p * C, D], sD); add("proj_out.bias", [p * p * C], 0.1)
    return out


def write_index(path, weight_map, total):
    with open(path, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f,
                  indent=2, sort_keys=True)
