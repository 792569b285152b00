#!/usr/bin/env python3
# Usage: python3 tests/mpi/realdims_model.py DIR   (docs/distributed.md, "Measured: CFG-parallel")
# A real-dims CogVideoX-2b transformer with 2 random layers (bf16), DDIM scheduler, and random
# [1, 226, 4096] embeddings: for timing stage 2 under mpirun. Pure Python (no numpy).
import json, struct, random, os, sys, array
root = sys.argv[1]
random.seed(1)
blk = array.array('f', [random.uniform(-1, 1) for _ in range(1 << 16)])
def bf16_bytes(nfloats, scale, offset):
    a = array.array('f', [offset + scale * v for v in blk])
    b = a.tobytes()
    hi = b''.join(b[i+2:i+4] for i in range(0, len(b), 4))   # bf16 = upper half
    reps = nfloats // len(a) + 1
    return (hi * reps)[:2 * nfloats]
def f32_bytes(nfloats, scale, offset):
    a = array.array('f', [offset + scale * v for v in blk]).tobytes()
    return (a * (nfloats // len(blk) + 1))[:4 * nfloats]
def write_st(path, tensors, meta=None, dt='BF16'):
    hdr = {}; off = 0; parts = []
    for name, shape, data, d in tensors:
        hdr[name] = {"dtype": d, "shape": shape, "data_offsets": [off, off + len(data)]}; off += len(data); parts.append(data)
    if meta: hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode(); h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h))); f.write(h)
        for p in parts: f.write(p)
heads, layers, D, E, T, C, p, hd = 30, 2, 1920, 512, 4096, 16, 2, 64
os.makedirs(root + '/transformer', exist_ok=True); os.makedirs(root + '/scheduler', exist_ok=True)
json.dump({"_class_name": "CogVideoXTransformer3DModel", "num_attention_heads": heads, "attention_head_dim": hd,
           "num_layers": layers, "in_channels": C, "out_channels": C, "text_embed_dim": T, "time_embed_dim": E,
           "patch_size": p, "sample_height": 60, "sample_width": 90, "sample_frames": 49,
           "use_rotary_positional_embeddings": False}, open(root + '/transformer/config.json', 'w'))
ts = []
def add(name, shape, scale, offset=0.0):
    n = 1
    for s in shape: n *= s
    ts.append((name, shape, bf16_bytes(n, scale, offset), 'BF16'))
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
write_st(root + '/transformer/diffusion_pytorch_model.safetensors', ts)
json.dump({"_class_name": "CogVideoXDDIMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
           "beta_start": 0.00085, "clip_sample": False, "clip_sample_range": 1.0, "num_train_timesteps": 1000,
           "prediction_type": "v_prediction", "rescale_betas_zero_snr": True, "sample_max_value": 1.0,
           "set_alpha_to_one": True, "snr_shift_scale": 3.0, "steps_offset": 0, "timestep_spacing": "trailing",
           "trained_betas": None}, open(root + '/scheduler/scheduler_config.json', 'w'))
json.dump({"_class_name": "CogVideoXPipeline"}, open(root + '/model_index.json', 'w'))
os.makedirs(root + '/in', exist_ok=True)
e = f32_bytes(226 * T, 0.1, 0.0)
write_st(root + '/in/stage1_embeddings.safetensors',
         [("prompt_embeds", [1, 226, T], e, 'F32'), ("negative_prompt_embeds", [1, 226, T], f32_bytes(226 * T, 0.05, 0.01), 'F32')],
         meta={"model_id": root})
print("ok")
