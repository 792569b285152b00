#!/usr/bin/env python3
"""Make the test fixtures of the CLIP image side of Wan 2.1 I2V (tests/stage1_clip.c).

  tests/data/golden_wan/e2e_i2v_clip/     the golden e2e_i2v case's image.png, case.json,
      model/image_encoder, model/image_processor, and the four image tensors of its
      expected.safetensors (clip_pixel_values, image_embeds, image_preprocessed, image_uint8)
  tests/data/stage1/clip_resize.safetensors   Pillow references (needs Pillow: Debian's
      python3-pil, run with /usr/bin/python3; Pillow's version is recorded in the metadata):
        a_src [77, 101, 3] U8  -> a_bicubic [224, 293, 3]  (CLIP shortest edge 224, upscale)
                               -> a_pixel_values [3, 224, 224] F32 (centre crop at x = 34, then
                                  float32(u8 * (1/255 in float64)), (x - mean) / std in float32,
                                  the OpenAI CLIP mean/std: numpy's arithmetic, done here exactly
                                  because float64-then-round equals float32 for one + - * /)
        b_src [240, 256, 3] U8 -> b_bicubic [224, 238, 3]  (downscale with a stretched support)
        c_src [23, 37, 3] U8   -> c_<filter>_{up [31, 50, 3], down [11, 17, 3], h [23, 20, 3],
                                  v [9, 37, 3]} for filter in lanczos, bilinear, bicubic, box, hamming
  tests/data/stage1/clip_bf16_sharded/image_encoder/   the golden image encoder as a 2-shard BF16
      CLIPVisionModelWithProjection checkpoint (index.json, post_layernorm and a visual_projection
      the model does not use), and clip_bf16_rounded_f32/image_encoder/ the same rounded values
      as one F32 CLIPVisionModel file, so the sharded/bf16 path can be checked exactly

Run from the repository root: /usr/bin/python3 scripts/make_clip_fixtures.py [path to shared/golden_wan]
"""
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_fixture import bf16_value, f32_values, read_safetensors, write_index, write_safetensors, write_safetensors_bytes  # noqa: E402

GOLDEN = sys.argv[1] if len(sys.argv) > 1 else "../shared/golden_wan"
CASE = os.path.join(GOLDEN, "e2e_i2v")
OUT_CASE = "tests/data/golden_wan/e2e_i2v_clip"
OUT = "tests/data/stage1"
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def golden_case():
    if os.path.exists(OUT_CASE):
        shutil.rmtree(OUT_CASE)
    os.makedirs(os.path.join(OUT_CASE, "model"))
    for f in ("image.png", "case.json"):
        shutil.copy(os.path.join(CASE, f), OUT_CASE)
    for d in ("image_encoder", "image_processor"):
        shutil.copytree(os.path.join(CASE, "model", d), os.path.join(OUT_CASE, "model", d))
    src = read_safetensors(os.path.join(CASE, "expected.safetensors"))
    keep = ["clip_pixel_values", "image_embeds", "image_preprocessed", "image_uint8"]
    write_safetensors_bytes(os.path.join(OUT_CASE, "expected.safetensors"), [(k,) + src[k] for k in keep])
    for root, dirs, files in os.walk(OUT_CASE):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755 if n in dirs else 0o644)


def pattern(w, h, seed):
    """Gradients, hard 0/255 edges (so the cubic/lanczos overshoot is clipped) and LCG noise."""
    out, s = bytearray(), seed
    for y in range(h):
        for x in range(w):
            s = (s * 1103515245 + 12345) & 0x7FFFFFFF
            n = (s >> 16) % 64
            r = (x * 255) // max(w - 1, 1)
            g = 255 if (x // 5 + y // 4) % 2 else 0
            b = min(255, (y * 200) // max(h - 1, 1) + n)
            out += bytes((r if n < 48 else 255 - r, g, b))
    return bytes(out)


def resize_fixtures():
    from PIL import Image
    ents = []

    def add(name, img):
        w, h = img.size
        ents.append((name, "U8", [h, w, 3], img.tobytes()))

    a = Image.frombytes("RGB", (101, 77), pattern(101, 77, 7))
    add("a_src", a)
    ab = a.resize((293, 224), resample=Image.BICUBIC)   # int(224 * 101 / 77) = 293
    add("a_bicubic", ab)
    crop = ab.crop(((293 - 224) // 2, 0, (293 - 224) // 2 + 224, 224)).tobytes()
    pv = []
    for c in range(3):
        m, sd = f32(MEAN[c]), f32(STD[c])
        for i in range(224 * 224):
            x = f32(crop[i * 3 + c] * (1 / 255))
            pv.append(f32(f32(x - m) / sd))
    ents.append(("a_pixel_values", "F32", [3, 224, 224], struct.pack("<%df" % len(pv), *pv)))

    b = Image.frombytes("RGB", (256, 240), pattern(256, 240, 11))
    add("b_src", b)
    add("b_bicubic", b.resize((238, 224), resample=Image.BICUBIC))   # int(224 * 256 / 240) = 238

    c = Image.frombytes("RGB", (37, 23), pattern(37, 23, 5))
    add("c_src", c)
    filters = {"lanczos": Image.LANCZOS, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "box": Image.BOX,
               "hamming": Image.HAMMING}
    for name, f in filters.items():
        for tag, size in (("up", (50, 31)), ("down", (17, 11)), ("h", (20, 23)), ("v", (37, 9))):
            add("c_%s_%s" % (name, tag), c.resize(size, resample=f))
    import PIL
    os.makedirs(OUT, exist_ok=True)
    write_safetensors_bytes(os.path.join(OUT, "clip_resize.safetensors"), ents,
                            {"format": "pt", "pillow": PIL.__version__})


def bf16_encoder():
    d = os.path.join(CASE, "model", "image_encoder")
    src = read_safetensors(os.path.join(d, "model.safetensors"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    sharded = os.path.join(OUT, "clip_bf16_sharded", "image_encoder")
    rounded = os.path.join(OUT, "clip_bf16_rounded_f32", "image_encoder")
    for p in (sharded, rounded):
        os.makedirs(p, exist_ok=True)
    D = cfg["hidden_size"]
    pcfg = dict(cfg, architectures=["CLIPVisionModelWithProjection"], torch_dtype="bfloat16")
    with open(os.path.join(sharded, "config.json"), "w") as f:
        json.dump(pcfg, f, indent=2, sort_keys=True)
    shutil.copy(os.path.join(d, "config.json"), rounded)
    names = sorted(src)
    shards, flat, wmap, total = {1: [], 2: []}, [], {}, 0
    for i, name in enumerate(names):
        dtype, shape, raw = src[name]
        vals = [bf16_value(v) for v in f32_values(raw)]
        k = 1 if i < len(names) // 2 else 2
        shards[k].append((name, "BF16", shape, vals))
        flat.append((name, "F32", shape, vals))
        wmap[name] = "model-%05d-of-00002.safetensors" % k
    proj = [bf16_value(((i * 37) % 17 - 8) / 16.0) for i in range(cfg["projection_dim"] * D)]
    shards[2].append(("visual_projection.weight", "BF16", [cfg["projection_dim"], D], proj))
    wmap["visual_projection.weight"] = "model-00002-of-00002.safetensors"
    for k, ents in shards.items():
        total += write_safetensors(os.path.join(sharded, "model-%05d-of-00002.safetensors" % k), ents)
    write_index(os.path.join(sharded, "model.safetensors.index.json"), wmap, total)
    write_safetensors(os.path.join(rounded, "model.safetensors"), flat)


def main():
    golden_case()
    bf16_encoder()
    resize_fixtures()


if __name__ == "__main__":
    main()
