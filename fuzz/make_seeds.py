#!/usr/bin/env python3
"""Write the seed corpora in fuzz/corpus/<target>/ (standard library only; rerun to regenerate).
safetensors: small valid files (every dtype, metadata, scalar and empty tensors, a real sharded
fixture) and one broken file per validation rule. config: the real config files of the golden
fixtures plus a few edge cases. index: weight maps for the two shards fuzz_index.c writes."""
import glob, json, os, shutil, struct, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}


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
             ("bytes.u8", "U8", [3]), ("mask.bool", "BOOL", [2])]
    write("safetensors", "valid_every_dtype", st_file(every, {"format": "pt", "note": "seed"}))
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


def checkpoint(gen, step=3, meta=None, lat_shape=(1, 1, 2, 2, 2), old=True, lat_bytes=None):
    meta = {"format": "cogvideox.c stage2 checkpoint v1", "steps_done": str(step), "run.seed": "42"} \
        if meta is None else meta
    tensors = [("latents", "F32", list(lat_shape), lat_bytes or struct.pack("<8f", *[0.5 * i for i in range(8)])),
               ("step", "I64", [1], struct.pack("<q", step))]
    if old:
        tensors.append(("old_pred_original_sample", "F32", list(lat_shape), struct.pack("<8f", *range(8))))
    tensors.append(("generator", "U8", [len(gen)], gen))
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


if __name__ == "__main__":
    shutil.rmtree(CORPUS, ignore_errors=True)
    safetensors_seeds()
    config_seeds()
    genconfig_seeds()
    index_seeds()
    checkpoint_seeds()
    genvalidate_seeds()
    prompt_clean_seeds()
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        print(f"{t}: {len(files)} seeds, {size} bytes")
