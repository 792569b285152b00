#!/usr/bin/env python3
"""Random-weight safetensors files in the layouts stable-diffusion.cpp reads (ComfyUI repackaged names), for the
HunyuanVideo-1.5 and Wan 2.2 side-by-side benchmark (bench/side_by_side_video.sh), from sd.cpp's own parameter list
(the output of dump_params.cpp). Real widths; N transformer / LLM / UMT5 layers.

  tag       file (in OUTDIR)                             sd.cpp prefix stripped             layers
  hvdit     hunyuanvideo1.5_480p_t2v_fp16.safetensors    model.diffusion_model.             double_blocks.N
  hvvae     hunyuanvideo15_vae_fp16.safetensors          first_stage_model.                 -
  qwen      qwen_2.5_vl_7b_fp16.safetensors              text_encoders.llm.                 model.layers.N
  umt5      umt5_xxl_fp16.safetensors                    text_encoders.t5xxl.transformer.   encoder.block.N
  wan22dit  wan2.2_ti2v_5B_fp16.safetensors              model.diffusion_model.             blocks.N
  wan22vae  wan2.2_vae.safetensors                       first_stage_model.                 -

--layers N rebuilds each layered model from the dump's layer 0 (the dump's layers must all have the same tensors),
so the dump may have any layer count. sd.cpp sizes Wan2.2-TI2V-5B from its block count alone: N must be 30, or 2
with the two-line wan.hpp patch of README.md.
dtypes: tensors of 2 or more dims f16, 1-D ones (biases, norms) f32; the Wan2.2 DiT all f16 with the public file's
torch shapes for its 3 tensors whose torch and ggml shapes differ (the loader reads both the same: it merges a 5-D
[out, in, kd, kh, kw] into ggml's [out*in, kd, kh, kw] and ignores leading 1s).
The UMT5 embedding table (shared.weight) gets --umt5-vocab rows, 32128 by default: sd.cpp sizes the table from
the file, and the stub UMT5 tokenizer of the build (make_vocab_stubs.py: 203 pieces) makes ids < 203, so no timed
computation changes; it saves 1.8 GB of file and load (256384 = the real vocabulary, as in the dump).
Values: norm weights / scales / gammas 1, norm biases 0, everything else N(0, STD) clamped at 6 STD, seeded.
Streams tensor by tensor (little RAM); writes OUTDIR/<file>.part and renames it when complete.

Usage: make_sd_random.py PARAMS OUTDIR [--only hvdit,hvvae,qwen,umt5,wan22dit,wan22vae] [--layers 2] [--std 0.02]
                         [--umt5-vocab 32128] [--list]
       (PARAMS: dump_params' output, e.g. `dump_params 2 > params.txt`; --list prints `<file> <name> <dtype>
       <shape>` per tensor instead of writing)"""
import argparse, json, os, re, struct, sys
import numpy as np

MODELS = {  # tag: (file, sd.cpp prefix, per-layer name pattern or None, all-f16, seed)
    "hvdit": ("hunyuanvideo1.5_480p_t2v_fp16.safetensors", "model.diffusion_model.", r"double_blocks\.(\d+)\.", False, 1),
    "hvvae": ("hunyuanvideo15_vae_fp16.safetensors", "first_stage_model.", None, False, 2),
    "qwen": ("qwen_2.5_vl_7b_fp16.safetensors", "text_encoders.llm.", r"model\.layers\.(\d+)\.", False, 3),
    "umt5": ("umt5_xxl_fp16.safetensors", "text_encoders.t5xxl.transformer.", r"encoder\.block\.(\d+)\.", False, 4),
    "wan22dit": ("wan2.2_ti2v_5B_fp16.safetensors", "model.diffusion_model.", r"blocks\.(\d+)\.", True, 5),
    "wan22vae": ("wan2.2_vae.safetensors", "first_stage_model.", None, False, 6),
}
# the public Wan2.2-TI2V-5B file's torch shapes where sd.cpp's ggml view differs (same elements, same order)
TORCH_SHAPES = {"wan22dit": {"patch_embedding.weight": (3072, 48, 1, 2, 2), "head.modulation": (1, 2, 3072),
                             "modulation": (1, 6, 3072)}}

def die(msg):
    print("make_sd_random.py: " + msg, file=sys.stderr)
    sys.exit(1)

def read_params(path):
    """{tag: [(name without prefix, shape tuple)]} from dump_params' lines `<tag> <name> <dtype> <shape>`."""
    out = {}
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 4 or parts[0] not in MODELS or not re.fullmatch(r"\d+(,\d+)*", parts[3]):
                die("%s:%d: expected '<model> <name> <f16|f32> <d0,d1,...>' with a model of %s, got '%s'"
                    % (path, ln, ",".join(MODELS), line.rstrip("\n")))
            tag, name, shape = parts[0], parts[1], tuple(int(d) for d in parts[3].split(","))
            prefix = MODELS[tag][1]
            if not name.startswith(prefix):
                die("%s:%d: tensor '%s' of %s does not start with '%s'" % (path, ln, name, tag, prefix))
            out.setdefault(tag, []).append((name[len(prefix):], shape))
    return out

def with_layers(tag, tensors, n):
    """The model's tensors with n layers, built from the dump's layer 0."""
    pat = MODELS[tag][2]
    if pat is None:
        return tensors
    rx = re.compile("^" + pat)
    layers, rest = {}, []
    for name, shape in tensors:
        m = rx.match(name)
        if m:
            i = int(m.group(1))
            layers.setdefault(i, []).append((name[m.end():], shape))
        else:
            rest.append((name, shape))
    if 0 not in layers:
        die("%s: the dump has no layer 0 (names matching '%s')" % (tag, pat))
    for i, t in layers.items():
        if sorted(t) != sorted(layers[0]):
            die("%s: the dump's layer %d differs from its layer 0: cannot repeat layer 0" % (tag, i))
    stem = pat.split("(")[0].replace("\\", "")
    return rest + [("%s%d.%s" % (stem, i, sub), shape) for i in range(n) for sub, shape in layers[0]]

def kind(name, ndim):
    """'1' (norm scale), '0' (norm bias) or 'w' (random)."""
    last = name.rsplit(".", 1)[-1]
    if ndim == 1 and (last in ("gamma", "scale") or (last == "weight" and "norm" in name)):
        return "1"
    if ndim == 1 and last == "bias" and re.search(r"norm\d*\.bias$", name):
        return "0"
    return "w"

def write(path, tensors, all_f16, std, seed, list_only=False):
    rng = np.random.default_rng(seed)
    hdr, off, plan = {"__metadata__": {"format": "pt", "note": "random weights N(0,%g)" % std}}, 0, []
    for name, shape in tensors:
        dt = np.float16 if all_f16 or len(shape) >= 2 else np.float32
        numel = int(np.prod(shape))
        nb = numel * np.dtype(dt).itemsize
        hdr[name] = {"dtype": "F16" if dt == np.float16 else "F32", "shape": list(shape), "data_offsets": [off, off + nb]}
        plan.append((name, numel, dt, kind(name, len(shape))))
        off += nb
    if list_only:  # what the header would hold: `<file> <name> <dtype> <shape>`
        for name, v in hdr.items():
            if name != "__metadata__":
                print(os.path.basename(path), name, v["dtype"], ",".join(map(str, v["shape"])))
        return
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, numel, dt, k in plan:
            if k != "w":
                f.write(np.full(numel, 1.0 if k == "1" else 0.0, dtype=dt).tobytes())
                continue
            CH = 1 << 26
            for a in range(0, numel, CH):
                x = rng.standard_normal(min(CH, numel - a), dtype=np.float32)
                x *= std
                np.clip(x, -6 * std, 6 * std, out=x)
                f.write(x.astype(dt).tobytes())
    os.replace(tmp, path)
    print("wrote %s: %d tensors, %.2f GB" % (path, len(tensors), (8 + len(h) + off) / 1e9), flush=True)

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("params")
    ap.add_argument("outdir")
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--umt5-vocab", type=int, default=32128)
    ap.add_argument("--list", action="store_true", help="print the tensors each file would hold; write nothing")
    a = ap.parse_args()
    only = a.only.split(",")
    for tag in only:
        if tag not in MODELS:
            die("--only: unknown model '%s' (expected a comma list of %s)" % (tag, ",".join(MODELS)))
    if a.umt5_vocab < 1:
        die("--umt5-vocab must be >= 1 (got %d)" % a.umt5_vocab)
    if a.layers < 1:
        die("--layers must be >= 1 (got %d)" % a.layers)
    if "wan22dit" in only and a.layers not in (2, 30):
        die("--layers %d: sd.cpp's Wan2.2-TI2V-5B needs 30 blocks, or 2 with the wan.hpp patch (README.md)" % a.layers)
    params = read_params(a.params)
    for tag in only:
        if tag not in params:
            die("%s: no tensors of model '%s' (make it with dump_params)" % (a.params, tag))
    if not a.list:
        os.makedirs(a.outdir, exist_ok=True)
    for tag in only:
        fname, _, _, all_f16, seed = MODELS[tag]
        shapes, tensors = TORCH_SHAPES.get(tag, {}), []
        for n, s in with_layers(tag, params[tag], a.layers):
            t = shapes.get(re.sub(r"^blocks\.\d+\.", "", n))
            if t is not None and int(np.prod(t)) != int(np.prod(s)):
                die("%s: %s: torch shape %s has not the elements of sd.cpp's %s" % (tag, n, t, s))
            if tag == "umt5" and n == "shared.weight":
                t = (a.umt5_vocab,) + s[1:]
            tensors.append((n, t or s))
        write(os.path.join(a.outdir, fname), tensors, all_f16, a.std, seed, a.list)

if __name__ == "__main__":
    main()
