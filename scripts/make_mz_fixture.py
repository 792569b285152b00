#!/usr/bin/env python3
"""A CogVideoX transformer GGUF (Q4_0, diffusers names) rewritten in the layout of MinusZone's /
Kijai's CogVideoX_5b_*GGUF_Q4_0.safetensors (docs/models.md, "CogVideoX Q4_0 / fp8 safetensors"),
standard library only:

  * attn1.to_q / to_k / to_v / to_out.0 and ff.net.0.proj / ff.net.2 weights:
    `<module>.Q4_0_qweight`, U8 [out, in / 32 * 18], the GGUF's Q4_0 blocks byte for byte;
  * their biases: F16 (the loader's bias buffer), rounded to nearest even;
  * every other tensor: F8_E4M3 (torch.float8_e4m3fn), rounded to nearest even from its value in
    the GGUF (F32, F16, or Q4_0 dequantized as ggml does: d * (q - 8), exact).

    python3 scripts/make_mz_fixture.py tests/data/golden_gguf/cogvideox/cogvideox-Q4_0.gguf \\
        tests/data/mz/cogvideox-mz-Q4_0.safetensors
"""
import bisect, os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_fixture import write_safetensors_bytes  # noqa: E402

GGML = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18)}   # id: (name, block, bytes per block)
QUANTIZED = ("attn1.to_q.", "attn1.to_k.", "attn1.to_v.", "attn1.to_out.0.", "ff.net.0.proj.", "ff.net.2.")


def read_gguf(path):
    """[(name, type name, shape (PyTorch order), raw bytes)] in file order."""
    b = open(path, "rb").read()
    off = [0]

    def rd(fmt):
        v = struct.unpack_from("<" + fmt, b, off[0])
        off[0] += struct.calcsize("<" + fmt)
        return v

    def rs():
        n, = rd("Q")
        s = b[off[0]:off[0] + n].decode()
        off[0] += n
        return s

    def skip_value(t):
        if t == 8:
            rs()
        elif t == 9:
            et, n = rd("IQ")
            for _ in range(n):
                skip_value(et)
        else:
            rd({0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}[t])

    magic, version, n_tensors, n_kv = rd("IIQQ")
    assert magic == 0x46554747 and version == 3, path
    align = 32
    for _ in range(n_kv):
        key = rs()
        t, = rd("I")
        if key == "general.alignment":
            align, = rd("I")
        else:
            skip_value(t)
    infos = []
    for _ in range(n_tensors):
        name = rs()
        nd, = rd("I")
        ne = rd("Q" * nd)
        typ, rel = rd("IQ")
        infos.append((name, typ, list(ne[::-1]), rel))
    data = (off[0] + align - 1) // align * align
    out = []
    for name, typ, shape, rel in infos:
        tname, blk, bb = GGML[typ]
        n = 1
        for d in shape:
            n *= d
        out.append((name, tname, shape, b[data + rel:data + rel + n // blk * bb]))
    return out


def f16_value(bits):
    return struct.unpack("<e", struct.pack("<H", bits))[0]


def values(tname, raw):
    """The tensor's values as Python floats (exact)."""
    if tname == "F32":
        return struct.unpack("<%df" % (len(raw) // 4), raw)
    if tname == "F16":
        return struct.unpack("<%de" % (len(raw) // 2), raw)
    out = []   # Q4_0: f16 d, 16 bytes; low nibbles are values 0..15, high nibbles 16..31
    for i in range(0, len(raw), 18):
        d = f16_value(raw[i] | raw[i + 1] << 8)
        qs = raw[i + 2:i + 18]
        out += [((q & 15) - 8) * d for q in qs] + [((q >> 4) - 8) * d for q in qs]
    return out


# float8_e4m3fn: codes 0x00..0x7e are the non-negative finite values (0x7f is NaN), increasing.
E4M3 = [(c & 7) / 8 * 2.0 ** -6 if c >> 3 == 0 else (1 + (c & 7) / 8) * 2.0 ** ((c >> 3) - 7) for c in range(0x7f)]


def e4m3(x):
    """Round x to the nearest float8_e4m3fn code, ties to the even code (torch's .to(float8_e4m3fn))."""
    a = abs(x)
    if a > 448:
        raise ValueError("%r is outside float8_e4m3fn's range in this fixture" % x)
    i = bisect.bisect_left(E4M3, a)
    if i == len(E4M3) or (i > 0 and (a - E4M3[i - 1] < E4M3[i] - a or
                                     (a - E4M3[i - 1] == E4M3[i] - a and (i - 1) % 2 == 0))):
        i -= 1
    return i | (0x80 if struct.pack("<d", x)[7] & 0x80 else 0)


def main(src, dst):
    entries = []
    for name, tname, shape, raw in read_gguf(src):
        module = name.rsplit(".", 1)[0] + "."
        quantized = any(module.endswith(q) for q in QUANTIZED)
        if quantized and name.endswith(".weight"):
            assert tname == "Q4_0", name
            entries.append((module + "Q4_0_qweight", "U8", [shape[0], shape[1] // 32 * 18], raw))
        elif quantized:
            vals = values(tname, raw)
            entries.append((name, "F16", shape, struct.pack("<%de" % len(vals), *vals)))
        else:
            entries.append((name, "F8_E4M3", shape, bytes(e4m3(v) for v in values(tname, raw))))
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    write_safetensors_bytes(dst, entries, {"format": "pt"})
    print("%s: %d tensors (%d Q4_0_qweight, %d F16, %d F8_E4M3), %d bytes" % (
        dst, len(entries), sum(e[1] == "U8" for e in entries), sum(e[1] == "F16" for e in entries),
        sum(e[1] == "F8_E4M3" for e in entries), os.path.getsize(dst)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
