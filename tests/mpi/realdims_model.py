#!/usr/bin/env python3
# Usage: python3 tests/mpi/realdims_model.py DIR   (docs/distributed.md, "Measured: CFG-parallel")
# A real-dims CogVideoX-2b transformer with 2 random layers (bf16), DDIM scheduler, and random
# [1, 226, 4096] embeddings: for timing stage 2 under mpirun. Pure Python (no numpy): the values
# are one 64 Ki block of uniform draws repeated, fast enough for GBs.
import array, json, os, random, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts'))
from safetensors_fixture import cogvideox_transformer_layout, write_safetensors_bytes

root = sys.argv[1]
random.seed(1)
blk = array.array('f', [random.uniform(-1, 1) for _ in range(1 << 16)])


def f32_bytes(nfloats, scale, offset):
    a = array.array('f', [offset + scale * v for v in blk]).tobytes()
    return (a * (nfloats // len(blk) + 1))[:4 * nfloats]


def bf16_bytes(nfloats, scale, offset):
    b = array.array('f', [offset + scale * v for v in blk]).tobytes()
    hi = b''.join(b[i + 2:i + 4] for i in range(0, len(b), 4))   # bf16 = upper half (truncation)
    return (hi * (nfloats // len(blk) + 1))[:2 * nfloats]


cfg = {"_class_name": "CogVideoXTransformer3DModel", "num_attention_heads": 30, "attention_head_dim": 64,
       "num_layers": 2, "in_channels": 16, "out_channels": 16, "text_embed_dim": 4096, "time_embed_dim": 512,
       "patch_size": 2, "sample_height": 60, "sample_width": 90, "sample_frames": 49,
       "use_rotary_positional_embeddings": False}
os.makedirs(root + '/transformer', exist_ok=True)
os.makedirs(root + '/scheduler', exist_ok=True)
json.dump(cfg, open(root + '/transformer/config.json', 'w'))
tensors = []
for name, shape, scale, offset in cogvideox_transformer_layout(cfg):
    n = 1
    for s in shape:
        n *= s
    tensors.append((name, 'BF16', shape, bf16_bytes(n, scale, offset)))
write_safetensors_bytes(root + '/transformer/diffusion_pytorch_model.safetensors', tensors)
json.dump({"_class_name": "CogVideoXDDIMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
           "beta_start": 0.00085, "clip_sample": False, "clip_sample_range": 1.0, "num_train_timesteps": 1000,
           "prediction_type": "v_prediction", "rescale_betas_zero_snr": True, "sample_max_value": 1.0,
           "set_alpha_to_one": True, "snr_shift_scale": 3.0, "steps_offset": 0, "timestep_spacing": "trailing",
           "trained_betas": None}, open(root + '/scheduler/scheduler_config.json', 'w'))
json.dump({"_class_name": "CogVideoXPipeline"}, open(root + '/model_index.json', 'w'))
os.makedirs(root + '/in', exist_ok=True)
T = cfg["text_embed_dim"]
write_safetensors_bytes(root + '/in/stage1_embeddings.safetensors',
                        [("prompt_embeds", 'F32', [1, 226, T], f32_bytes(226 * T, 0.1, 0.0)),
                         ("negative_prompt_embeds", 'F32', [1, 226, T], f32_bytes(226 * T, 0.05, 0.01))],
                        metadata={"model_id": root})
print("ok")
