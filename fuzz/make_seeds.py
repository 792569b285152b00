#!/usr/bin/env python3
"""Write the seed corpora in fuzz/corpus/<target>/ (standard library only; rerun to regenerate).
safetensors: small valid files (every dtype, metadata, scalar and empty tensors, a real sharded
fixture) and one broken file per validation rule. config: the real config files of the golden
fixtures plus a few edge cases. index: weight maps for the two shards fuzz_index.c writes."""
import glob, json, os, shutil, struct, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1, "F8_E4M3": 1}


def st_file(tensors, meta=None, pad=True, raw_header=None):
    """tensors: list of (name, dtype, shape); data bytes are small values (never '}')."""
    header, off = {}, 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape in tensors:
        n = SIZES.get(dtype, 4)
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    hj = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        hj += b" " * ((8 - len(hj) % 8) % 8)
    data = bytes((i * 7) % 100 for i in range(off))
    return struct.pack("<Q", len(hj)) + hj + data


def write(target, name, blob):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob if isinstance(blob, bytes) else blob.encode())


def safetensors_seeds():
    every = [("w.f32", "F32", [2, 3]), ("b.bf16", "BF16", [3]), ("h.f16", "F16", [2, 2]),
             ("d.f64", "F64", [1]), ("steps.i64", "I64", [2]), ("ids.i32", "I32", [2]),
             ("bytes.u8", "U8", [3]), ("mask.bool", "BOOL", [2]), ("w.f8", "F8_E4M3", [2, 2])]
    write("safetensors", "valid_every_dtype", st_file(every, {"format": "pt", "note": "seed"}))
    # MinusZone's CogVideoX Q4_0 layout: ggml blocks as U8 `<module>.Q4_0_qweight`, the rest fp8
    write("safetensors", "valid_qweights", st_file([("ff.Q4_0_qweight", "U8", [2, 36]), ("ff.bias", "F16", [2]),
                                                    ("proj.Q8_0_qweight", "U8", [1, 34]),
                                                    ("norm.weight", "F8_E4M3", [64])]))
    write("safetensors", "valid_scalar_and_empty",
          st_file([("scalar", "F32", []), ("empty", "BF16", [0, 4]), ("x", "F16", [1, 1, 1, 1, 1, 1, 1, 2])]))
    write("safetensors", "valid_no_tensors", st_file([], {}))
    write("safetensors", "valid_metadata_only", st_file([], {"format": "pt", "total_size": "0"}))
    write("safetensors", "valid_unpadded", st_file([("a", "F32", [1])], pad=False))
    write("safetensors", "valid_nul_padding", struct.pack("<Q", 8) + b"{}\0\0\0\0\0\0")
    real = os.path.join(ROOT, "tests/data/sharded_2b/diffusion_pytorch_model-00001-of-00002.safetensors")
    if os.path.exists(real):
        shutil.copyfile(real, os.path.join(CORPUS, "safetensors", "real_sharded_2b_shard1"))
    good = st_file([("a", "F32", [2]), ("b", "F32", [2])])
    hdr = lambda obj: json.dumps(obj, separators=(",", ":")).encode()
    ent = lambda dt, shape, b, e: {"dtype": dt, "shape": shape, "data_offsets": [b, e]}
    broken = {
        "bad_empty": b"",
        "bad_short": b"\x02\x00\x00",
        "bad_truncated": good[:-3],
        "bad_len_past_eof": struct.pack("<Q", 4096) + good[8:],
        "bad_len_huge": struct.pack("<Q", 1 << 62) + good[8:],
        "bad_len_tiny": struct.pack("<Q", 1) + b"{",
        "bad_json": st_file([], raw_header=b'{"a":{"dtype":"F32",'),
        "bad_trailing": st_file([], raw_header=b'{} x'),
        "bad_not_object": st_file([], raw_header=b'[1,2]'),
        "bad_unknown_dtype": st_file([], raw_header=hdr({"a": ent("F8", [1], 0, 1)})) + b"\0",
        "bad_offsets_out_of_range": st_file([], raw_header=hdr({"a": ent("F32", [1], 0, 4)})),
        "bad_offsets_reversed": st_file([], raw_header=hdr({"a": ent("U8", [1], 4, 3)})) + b"\0" * 4,
        "bad_overlap": st_file([], raw_header=hdr({"a": ent("F32", [2], 0, 8), "b": ent("F32", [1], 4, 8)})) + b"\0" * 8,
        "bad_shape_mismatch": st_file([], raw_header=hdr({"a": ent("F32", [3], 0, 8)})) + b"\0" * 8,
        "bad_negative_dim": st_file([], raw_header=hdr({"a": ent("F32", [-1], 0, 0)})),
        "bad_nine_dims": st_file([], raw_header=hdr({"a": ent("U8", [1] * 9, 0, 1)})) + b"\0",
        "bad_overflow": st_file([], raw_header=hdr({"a": ent("F64", [1 << 40, 1 << 40], 0, 0)})),
        "bad_float_dim": st_file([], raw_header=b'{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}') + b"\0",
        "bad_metadata_value": st_file([], raw_header=hdr({"__metadata__": {"k": 1}})),
        "bad_metadata_type": st_file([], raw_header=hdr({"__metadata__": []})),
        "bad_entry_type": st_file([], raw_header=hdr({"a": "F32"})),
        "bad_offsets_len3": st_file([], raw_header=b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}') + b"\0",
        "bad_nul_key": st_file([], raw_header=b'{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                              b'"a\\u0000c":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}') + b"\0\0",
        "bad_deep": st_file([], raw_header=b"[" * 200 + b"]" * 200),
    }
    for name, blob in broken.items():
        write("safetensors", name, blob)


def config_seeds():
    seen = set()
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/data/golden/*/model/**/*.json"), recursive=True) +
                       glob.glob(os.path.join(ROOT, "tests/data/*/config.json")) +
                       glob.glob(os.path.join(ROOT, "tests/data/**/*.index.json"), recursive=True)):
        blob = open(path, "rb").read()
        if blob in seen or len(blob) > 16384:
            continue
        seen.add(blob)
        rel = os.path.relpath(path, os.path.join(ROOT, "tests/data")).replace("/", "_")
        write("config", "real_" + rel, blob)
    edge = {
        "edge_types": '{"scaling_factor": "abc", "num_layers": 2.0, "norm_eps": 1e-5, "block_out_channels": [128, 256.0],'
                      ' "up_block_types": ["A", 1], "timestep_spacing": null, "legacy": 0, "seed": -9223372036854775808}',
        "edge_big_numbers": '{"num_layers": 1e300, "sample_width": 18446744073709551615, "steps_offset": -1e19,'
                            ' "scaling_factor": NaN, "beta_end": Infinity, "norm_eps": -Infinity}',
        "edge_nested": '{"weight_map": {"a": "x.safetensors"}, "block_out_channels": [[1], {"a": 2}]}',
        "edge_trailing": '{"num_layers": 2} trailing',
        "edge_not_object": '[1, 2, 3]',
        "edge_unterminated": '{"num_layers": ',
        "edge_escapes": '{"prompt": "a\\u0000b\\ud83d\\ude00\\n", "\\u0000": 1}',
        "edge_empty": '{}',
        "edge_long_array": '{"block_out_channels": [' + ",".join(["1"] * 40) + ']}',
    }
    for name, text in edge.items():
        write("config", name, text)


def genconfig_seeds():
    write("genconfig", "typical", json.dumps({"prompt": "A panda playing guitar", "negative_prompt": "",
                                              "num_frames": 9, "height": 480, "width": 720, "seed": 42,
                                              "guidance_scale": 6.0, "num_inference_steps": 50,
                                              "my_custom_key": {"nested": [1, 2.5, None, True]}}, indent=2))
    write("genconfig", "empty_object", "{}")
    write("genconfig", "numbers", '{"a": 1e400, "b": -0.0, "c": NaN, "d": 1.10, "e": 18446744073709551615, "num_frames": "x"}')
    write("genconfig", "strings", '{"s": "\\u00e9\\ud83d\\ude00 \\/ \\\\", "k\\u0000z": 1, "": 2}')
    write("genconfig", "bad_not_object", "[1]")
    write("genconfig", "bad_truncated", '{"prompt": "a')
    write("genconfig", "bad_empty", "")
    tc = os.path.join(ROOT, "tests/data/golden/e2e_2b/model/transformer/config.json")
    if os.path.exists(tc):
        shutil.copyfile(tc, os.path.join(CORPUS, "genconfig", "real_transformer_config.json"))


def index_seeds():
    names1 = ["patch_embed.proj.weight", "patch_embed.proj.bias"]
    names2 = ["norm_final.weight", "steps", "mask", "empty"]
    wm = {n: "model-00001-of-00002.safetensors" for n in names1}
    wm.update({n: "model-00002-of-00002.safetensors" for n in names2})
    write("index", "valid_two_shards", json.dumps({"metadata": {"total_size": 128}, "weight_map": wm}, indent=2))
    write("index", "valid_one_shard", json.dumps({"weight_map": {names1[0]: "model-00001-of-00002.safetensors"}}))
    write("index", "bad_wrong_shard", json.dumps({"weight_map": {names1[0]: "model-00002-of-00002.safetensors"}}))
    write("index", "bad_missing_shard", json.dumps({"weight_map": {"x": "model-00003-of-00003.safetensors"}}))
    write("index", "bad_traversal", json.dumps({"weight_map": {"x": "../etc/passwd", "y": ".."}}))
    write("index", "bad_empty_map", json.dumps({"weight_map": {}}))
    write("index", "bad_not_object", json.dumps({"weight_map": ["a"]}))
    write("index", "bad_value_type", json.dumps({"weight_map": {"a": 3}}))
    write("index", "bad_self", json.dumps({"weight_map": {"a": "model.safetensors.index.json"}}))
    write("index", "bad_json", '{"weight_map": {"a": ')


def mt_state(seed):
    s = [seed & 0xffffffff]
    for j in range(1, 624):
        s.append((1812433253 * (s[-1] ^ (s[-1] >> 30)) + j) & 0xffffffff)
    return s


def generator(seed=42, nxt=0, left=1, cached=None, magic=0x3130474E52585643, reserved=0):
    """cvx_generator (common/rng.h) byte for byte: 2536 bytes."""
    b = struct.pack("<QQ", magic, seed) + struct.pack("<624I", *mt_state(seed))
    b += struct.pack("<Ii", nxt, left) + struct.pack("<dII", cached or 0.0, 1 if cached is not None else 0, reserved)
    assert len(b) == 2536
    return b


M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)


def xxh64(data, seed=0):
    """XXH64 (common/fileio.c cvx_xxh64), for the checkpoint's content hash."""
    rotl = lambda x, r: ((x << r) | (x >> (64 - r))) & M64
    rnd = lambda acc, lane: (rotl((acc + lane * P2) & M64, 31) * P1) & M64
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = rnd(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0])
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M64
        for k in range(4):
            h = (((h ^ rnd(0, v[k])) * P1) + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h = ((rotl(h ^ rnd(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1) + P4) & M64
        i += 8
    if i + 4 <= n:
        h = ((rotl(h ^ ((struct.unpack_from("<I", data, i)[0] * P1) & M64), 23) * P2) + P3) & M64
        i += 4
    while i < n:
        h = (rotl(h ^ ((data[i] * P5) & M64), 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


def seal(tensors, meta, skip="content_xxh64"):
    """The content hash of common/safetensors.h cvx_seal_hash: tensors by name (name, dtype, rank and
    shape as int64, data), then the metadata by key (key, value), each string with its NUL."""
    h = 0
    for name, dt, shape, raw in sorted(tensors, key=lambda t: t[0].encode()):
        h = xxh64(name.encode() + b"\0", h)
        h = xxh64(dt.encode() + b"\0", h)
        h = xxh64(struct.pack("<%dq" % (len(shape) + 1), len(shape), *shape), h)
        h = xxh64(raw, h)
    for k in sorted((k for k in meta if k != skip), key=lambda k: k.encode()):
        h = xxh64(k.encode() + b"\0", h)
        h = xxh64(meta[k].encode() + b"\0", h)
    return "%016x" % h


def checkpoint(gen, step=3, meta=None, lat_shape=(1, 1, 2, 2, 2), old=True, lat_bytes=None, sealed=True, tamper=None):
    meta = {"format": "cogvideox.c stage2 checkpoint v2", "steps_done": str(step), "run.seed": "42"} \
        if meta is None else meta
    tensors = [("latents", "F32", list(lat_shape), lat_bytes or struct.pack("<8f", *[0.5 * i for i in range(8)])),
               ("step", "I64", [1], struct.pack("<q", step))]
    if old:
        tensors.append(("old_pred_original_sample", "F32", list(lat_shape), struct.pack("<8f", *range(8))))
    tensors.append(("generator", "U8", [len(gen)], gen))
    if sealed:
        meta = dict(meta, content_xxh64=seal(tensors, meta))
    if tamper:   # a change after sealing (a flipped bit)
        tensors = tamper(tensors)
    header, off, blob = {"__metadata__": meta}, 0, b""
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blob += raw
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    return struct.pack("<Q", len(hj)) + hj + blob


def checkpoint_seeds():
    write("checkpoint", "valid_fresh", checkpoint(generator()))
    write("checkpoint", "valid_drawn", checkpoint(generator(nxt=5, left=620, cached=0.25), old=False))
    write("checkpoint", "valid_last_word", checkpoint(generator(nxt=624, left=1)))
    write("checkpoint", "bad_next_left_624", checkpoint(generator(nxt=624, left=624)))   # issue 14
    write("checkpoint", "bad_left_zero", checkpoint(generator(nxt=3, left=0)))
    write("checkpoint", "bad_magic", checkpoint(generator(magic=1)))
    write("checkpoint", "bad_generator_short", checkpoint(generator()[:-8]))
    write("checkpoint", "bad_nan_latents", checkpoint(generator(), lat_bytes=struct.pack("<8f", 0, 1, float("nan"), 0, 0, 0, 0, 0)))
    write("checkpoint", "bad_format", checkpoint(generator(), meta={"format": "x"}))
    write("checkpoint", "bad_step", checkpoint(generator(), step=0))
    write("checkpoint", "bad_step_total", checkpoint(generator(), step=50))   # issue 21: the run's last step
    write("checkpoint", "bad_unsealed", checkpoint(generator(), sealed=False))
    flip = lambda ts: [(n, d, s, bytes([r[0] ^ 1]) + r[1:] if n == "latents" else r) for n, d, s, r in ts]
    write("checkpoint", "bad_flipped_bit", checkpoint(generator(), tamper=flip))   # issue 21


def genvalidate_seeds():
    write("genvalidate", "typical", json.dumps({
        "prompt": "A panda playing guitar", "negative_prompt": "", "model_id": "/models/CogVideoX-2b",
        "num_frames": 49, "fps": 8, "height": 480, "width": 720, "num_inference_steps": 50,
        "guidance_scale": 6.0, "seed": 42, "stage1_embeddings_xxh64": "0123456789abcdef"}, indent=2))
    write("genvalidate", "bad_fps", '{"fps": -8}')
    write("genvalidate", "bad_nan", '{"guidance_scale": NaN, "num_layers": 1e9}')
    write("genvalidate", "bad_utf8", b'{"prompt": "\xff\xfe"}')
    write("genvalidate", "bad_hash", '{"stage2_latents_xxh64": "XYZ"}')
    write("genvalidate", "model_vae", '{"scaling_factor": 0, "block_out_channels": [128, 256, 0]}')
    for cfg in sorted(glob.glob(os.path.join(ROOT, "tests/data/golden/e2e_5b/model/*/config.json"))):
        shutil.copyfile(cfg, os.path.join(CORPUS, "genvalidate", "real_" + os.path.basename(os.path.dirname(cfg))))


def prompt_clean_seeds():
    """The Wan golden prompts and the rule cases of tests/data/ftfy/cases.json (raw bytes too)."""
    with open(os.path.join(ROOT, "tests/data/golden_wan/tokenizer/case.json"), encoding="utf-8") as f:
        for i, p in enumerate(json.load(f)["prompts"]):
            write("prompt_clean", "golden_%02d" % i, p.encode("utf-8"))
    with open(os.path.join(ROOT, "tests/data/ftfy/cases.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    for i, c in enumerate(cases):
        if "input_hex" in c:
            write("prompt_clean", "raw_%03d" % i, bytes.fromhex(c["input_hex"]))
        elif i < 48:
            write("prompt_clean", "rule_%03d" % i, c["input"].encode("utf-8"))
# ---- GGUF (fuzz_gguf): little-endian, see common/gguf.h ----
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
        "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110),
        "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}
KV_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}


def g_str(t):
    t = t.encode() if isinstance(t, str) else t
    return struct.pack("<Q", len(t)) + t


def g_value(vtype, value):
    if vtype == 8:
        return g_str(value)
    if vtype == 9:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(g_value(etype, v) for v in items)
    return struct.pack(KV_FMT[vtype], value)


def gguf_file(kvs, tensors, version=3, align=32, n_tensors=None, n_kv=None, raw_kvs=()):
    """kvs: (key, value type, value); raw_kvs: (key, encoded type + value) as read from a file;
    tensors: (name, ne innermost first, type name, data bytes or None), laid out aligned (None or
    short data is zero-padded to the tensor's size)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                len(kvs) + len(raw_kvs) if n_kv is None else n_kv)
    for key, raw in raw_kvs:
        out += g_str(key) + raw
    for key, vtype, value in kvs:
        out += g_str(key) + struct.pack("<I", vtype) + g_value(vtype, value)
    blobs, off = [], 0
    for name, ne, tname, raw in tensors:
        tid, blk, tsz = GGML[tname]
        n = 1
        for d in ne:
            n *= d
        size = n // blk * tsz
        raw = bytes(size) if raw is None else raw[:size].ljust(size, b"\0")
        out += g_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", tid, off)
        blobs.append((off, raw))
        off = (off + size + align - 1) // align * align
    out += b"\0" * ((align - len(out) % align) % align)
    data = bytearray(off)
    for o, raw in blobs:
        data[o:o + len(raw)] = raw
    return out + bytes(data)


def read_gguf(path):
    """(kvs as raw (key, type, value bytes), tensors (name, ne, type id, data)) of a real file."""
    b = open(path, "rb").read()
    _, _, nt, nk = struct.unpack_from("<4sIQQ", b, 0)
    pos, kvs = 24, []

    def rd_str(p):
        n = struct.unpack_from("<Q", b, p)[0]
        return b[p + 8:p + 8 + n], p + 8 + n

    def skip_value(t, p):
        if t == 8:
            return rd_str(p)[1]
        if t == 9:
            et, cnt = struct.unpack_from("<IQ", b, p)
            p += 12
            for _ in range(cnt):
                p = skip_value(et, p)
            return p
        return p + struct.calcsize(KV_FMT[t])

    for _ in range(nk):
        key, pos = rd_str(pos)
        t = struct.unpack_from("<I", b, pos)[0]
        end = skip_value(t, pos + 4)
        kvs.append((key, b[pos:end]))
        pos = end
    infos = []
    for _ in range(nt):
        name, pos = rd_str(pos)
        nd = struct.unpack_from("<I", b, pos)[0]
        ne = list(struct.unpack_from("<%dQ" % nd, b, pos + 4))
        tid, off = struct.unpack_from("<IQ", b, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        infos.append((name, ne, tid, off))
    data0 = (pos + 31) // 32 * 32
    return kvs, [(n, ne, tid, b[data0 + off:data0 + off + 4096]) for n, ne, tid, off in infos]


def gguf_seeds():
    rnd = bytes((i * 37 + 11) % 251 for i in range(4096))
    every = [("t.%s" % t, [GGML[t][1] * (2 if GGML[t][1] == 1 else 1), 2], t, rnd) for t in GGML]
    every.append(("scalar", [], "F32", struct.pack("<f", 1.5)))
    every.append(("empty", [0, 3], "Q4_K", b""))
    every.append(("five_d", [2, 2, 1, 2, 1], "F32", rnd))
    kv_all = [("general.architecture", 8, "wan"), ("general.file_type", 4, 15), ("u8", 0, 255), ("i8", 1, -128),
              ("u16", 2, 65535), ("i16", 3, -32768), ("i32", 5, -1), ("f32", 6, 0.5), ("bool", 7, 1),
              ("u64", 10, 2 ** 64 - 1), ("i64", 11, -2 ** 63), ("f64", 12, -0.0),
              ("tokens", 9, (8, ["a", "", "\u00e9\u00e8"])), ("shape", 9, (5, [3, -2, 5])), ("none", 9, (4, []))]
    write("gguf", "valid_every_type", gguf_file(kv_all, every))
    write("gguf", "valid_align_64", gguf_file([("general.alignment", 4, 64)] + kv_all[:2], every[:5], align=64))
    write("gguf", "valid_v2", gguf_file(kv_all[:2], every[6:8], version=2))
    write("gguf", "valid_no_tensors", gguf_file(kv_all, []))
    write("gguf", "valid_empty", gguf_file([], []))
    # real files: their metadata and tensor infos, each tensor cut to its first row (the 5-D one kept 5-D)
    for case, f in (("cogvideox", "cogvideox-Q4_0.gguf"), ("wan", "wan-Q4_K_S.gguf")):
        path = os.path.join(ROOT, "tests/data/golden_gguf", case, f)
        if not os.path.exists(path):
            continue
        kvs, infos = read_gguf(path)
        tname = {v[0]: k for k, v in GGML.items()}
        seen, tensors = set(), []
        for name, ne, tid, raw in infos:
            if tid in seen and len(tensors) > 6:
                continue
            seen.add(tid)
            short = [ne[0]] + [1] * (len(ne) - 1) if len(ne) > 1 else ne
            if ne[0] * GGML[tname[tid]][2] // GGML[tname[tid]][1] > 4096:
                continue
            tensors.append((name.decode(), short, tname[tid], raw))
        write("gguf", "real_" + case + "_small", gguf_file([], tensors, raw_kvs=kvs))
    bad = {
        "bad_magic": b"GGML" + struct.pack("<IQQ", 3, 0, 0),
        "bad_version1": gguf_file([], [], version=1),
        "bad_bigendian": gguf_file([], [], version=0x03000000),
        "bad_short": b"GGUF\x03\x00",
        "bad_many_tensors": gguf_file([], [], n_tensors=1 << 50),
        "bad_many_kv": gguf_file([], [], n_kv=1 << 50),
        "bad_align_pow2": gguf_file([("general.alignment", 4, 48)], every[:1]),
        "bad_align_type": gguf_file([("general.alignment", 5, 32)], every[:1]),
        "bad_dup_key": gguf_file([("a", 4, 1), ("a", 4, 2)], []),
        "bad_dup_tensor": gguf_file([], [every[0], every[0]]),
        "bad_nested_array": gguf_file([("a", 9, (9, []))], []),
        "bad_block_multiple": gguf_file([], [("w", [48, 1], "Q8_0", rnd)]),
        "bad_truncated": gguf_file(kv_all, every)[:-7],
        "bad_key_len": b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1 << 40) + b"abc" + bytes(32),
        "bad_overflow_dims": b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + g_str("w") + struct.pack("<IQQIQ", 2, 1 << 32, 1 << 32, 0, 0),
        "bad_unknown_type": b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + g_str("w") + struct.pack("<IQIQ", 1, 4, 99, 0) + bytes(16),
        "bad_nine_dims": b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + g_str("w") + struct.pack("<I", 9) + struct.pack("<9Q", *[1] * 9) + struct.pack("<IQ", 0, 0) + bytes(8),
        "bad_misaligned": b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + g_str("w") + struct.pack("<IQIQ", 1, 1, 0, 4) + bytes(16),
    }
    for name, blob in bad.items():
        write("gguf", name, blob)


if __name__ == "__main__":
    shutil.rmtree(CORPUS, ignore_errors=True)
    safetensors_seeds()
    config_seeds()
    genconfig_seeds()
    index_seeds()
    checkpoint_seeds()
    genvalidate_seeds()
    prompt_clean_seeds()
    gguf_seeds()
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        print(f"{t}: {len(files)} seeds, {size} bytes")
