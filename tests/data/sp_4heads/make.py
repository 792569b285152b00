#!/usr/bin/env python3
# Usage: python3 tests/data/sp_4heads/make.py   (writes transformer/ beside this script)
# The e2e_2b golden transformer's tiny config (tests/data/golden/e2e_2b/model/transformer) with 4
# attention heads instead of 3, and random f32 weights in the real diffusers layout: a model that
# `--sp 2` can split (sequence parallelism needs sp to divide the head count). tests/e2e_mpi.c
# puts it in a copy of the e2e_2b model (same text encoder, scheduler, VAE). Pure Python, seeded.
import json, os, random, struct, array
here = os.path.dirname(os.path.abspath(__file__))
src = os.path.join(here, '..', 'golden', 'e2e_2b', 'model', 'transformer', 'config.json')
cfg = json.load(open(src))
cfg['num_attention_heads'] = 4
heads, hd, layers = cfg['num_attention_heads'], cfg['attention_head_dim'], cfg['num_layers']
D, E, T, C, p = heads * hd, cfg['time_embed_dim'], cfg['text_embed_dim'], cfg['in_channels'], cfg['patch_size']
random.seed(11)
ts = []
def add(name, shape, scale, offset=0.0):
    n = 1
    for s in shape: n *= s
    ts.append((name, shape, array.array('f', [offset + scale * random.uniform(-1, 1) for _ in range(n)]).tobytes()))
sD, sE = D ** -0.5, E ** -0.5
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
out = os.path.join(here, 'transformer')
os.makedirs(out, exist_ok=True)
json.dump(cfg, open(os.path.join(out, 'config.json'), 'w'), indent=2, sort_keys=True)
hdr, off = {}, 0
for name, shape, data in ts:
    hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(data)]}
    off += len(data)
h = json.dumps(hdr).encode()
h += b' ' * ((8 - len(h) % 8) % 8)
with open(os.path.join(out, 'diffusion_pytorch_model.safetensors'), 'wb') as f:
    f.write(struct.pack('<Q', len(h))); f.write(h)
    for _, _, data in ts: f.write(data)
