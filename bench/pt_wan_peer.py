#!/usr/bin/env python3
"""Drive the PyTorch peer on Wan 2.1 at the shapes of our Wan benchmarks (bench/side_by_side_wan.sh):
upstream diffusers (>= 0.33, Wan) / transformers modules with random weights, timed on this CPU.
This file only calls them: the upstream sources come from the peer set-up (../shared/peer/README.md,
REFSRC pointing at a tree with diffusers 0.33.1), imported through the peer's refenv.py.

  /usr/bin/python3 bench/pt_wan_peer.py --only wan13,wan14,umt5,wanvae --dtype bf16|f32
      [--frames 81 --height 480 --width 832] [--layers 2] [--runs 1] [--warmup 0] [--threads 2]
      [--vae-latent 3,30,52] [--umt5-tokens 512]
prints one JSON object: {case: {"median_s": .., "runs_s": [..], ...}}.

  wan13 / wan14  one CFG step as WanPipeline runs it: two WanTransformer3DModel forwards of batch 1
                 (prompt, negative prompt; text 512 x 4096), Wan2.1-T2V-1.3B / -14B widths, --layers.
  umt5           WanPipeline._get_t5_prompt_embeds' encoder call for the prompt and the negative
                 prompt: UMT5EncoderModel (UMT5-XXL dims, --layers) on 512 tokens with the mask, twice.
  wanvae         AutoencoderKLWan (Wan 2.1 config) .decode of a latent [1, 16, F, h, w].

Attention: torch 1.13 has no scaled_dot_product_attention; the peer's shim builds the whole
[B, heads, S, S] matrix (103 GB at 32,760 tokens). Here SDPA is the same math (q kᵀ·scale, softmax, ·v,
in the tensors' dtype) over blocks of query rows, so it fits in memory; its time is reported apart."""
import argparse, json, math, os, statistics, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--only", default="wan13,wan14,umt5,wanvae")
ap.add_argument("--dtype", default="bf16", choices=("bf16", "f32"))
ap.add_argument("--frames", type=int, default=81); ap.add_argument("--height", type=int, default=480)
ap.add_argument("--width", type=int, default=832); ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--runs", type=int, default=1); ap.add_argument("--warmup", type=int, default=0)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--vae-latent", default="3,30,52"); ap.add_argument("--umt5-tokens", type=int, default=512)
ap.add_argument("--umt5-seq-len", type=int, default=0, help="the mask's real tokens (default all)")
ap.add_argument("--peer-dir", default=os.environ.get("PEER_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                               "..", "..", "shared", "peer")))
a = ap.parse_args()
sys.path.insert(0, os.path.abspath(a.peer_dir))
import refenv  # noqa: E402,F401  (the peer's upstream tree on the path, torch 1.13 shims)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(a.threads); torch.manual_seed(0)
dt = {"bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
only = a.only.split(",")
sdpa_time = [0.0]


def sdpa_blocked(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    assert not is_causal and dropout_p == 0.0
    t0 = time.perf_counter()
    L, S = query.size(-2), key.size(-2)
    s = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    rows = max(1, int((256 << 20) // (query[..., :1, :1].numel() * S * query.element_size())))   # ~256 MB of scores
    kt = key.transpose(-2, -1)
    out = torch.empty(query.shape[:-1] + (value.size(-1),), dtype=query.dtype)
    for i in range(0, L, rows):
        w = (query[..., i:i + rows, :] @ kt) * s
        if attn_mask is not None:
            m = attn_mask[..., i:i + rows, :] if attn_mask.dim() >= 2 and attn_mask.size(-2) == L else attn_mask
            w = w.masked_fill(m.logical_not(), float("-inf")) if m.dtype == torch.bool else w + m
        out[..., i:i + rows, :] = torch.softmax(w, dim=-1) @ value
    sdpa_time[0] += time.perf_counter() - t0
    return out


F.scaled_dot_product_attention = sdpa_blocked


def timeit(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    ts, att, cpu = [], [], []
    for _ in range(runs):
        sdpa_time[0] = 0.0
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        ts.append(time.perf_counter() - t0); cpu.append(time.process_time() - c0); att.append(sdpa_time[0])
        print("  run %.2f s (attention %.2f s; CPU %.1f s; load %s)" % (ts[-1], att[-1], cpu[-1], os.getloadavg()[0]),
              file=sys.stderr, flush=True)
    return {"median_s": statistics.median(ts), "runs_s": ts, "attention_s": statistics.median(att), "cpu_s": min(cpu)}


def peak_rss_gb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1e6
    return float("nan")


res = {"torch": torch.__version__, "dtype": a.dtype, "threads": a.threads}
with torch.no_grad():
    for case, heads, ffn in (("wan13", 12, 8960), ("wan14", 40, 13824)):
        if case not in only:
            continue
        from diffusers import WanTransformer3DModel
        m = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=heads, attention_head_dim=128, in_channels=16,
                                  out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=ffn, num_layers=a.layers,
                                  cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6).eval().to(dt)
        lf, lh, lw = (a.frames - 1) // 4 + 1, a.height // 8, a.width // 8
        x = torch.randn(1, 16, lf, lh, lw).to(dt)
        txt = [(torch.randn(1, 512, 4096) * 0.2).to(dt) for _ in range(2)]
        t = torch.tensor([999])
        print("%s %s: latent [1,16,%d,%d,%d] = %d tokens, %d layers" % (case, a.dtype, lf, lh, lw, lf * (lh // 2) * (lw // 2),
                                                                       a.layers), file=sys.stderr, flush=True)
        step = lambda: [m(x, t, e, return_dict=False)[0] for e in txt]   # noqa: E731  (cond, uncond)
        r = timeit(step, a.runs, a.warmup)
        r.update(tokens=lf * (lh // 2) * (lw // 2), layers=a.layers, peak_rss_gb=peak_rss_gb())
        res[case] = r
        del m
    if "umt5" in only:
        from transformers import UMT5Config, UMT5EncoderModel
        conf = UMT5Config(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=a.layers, num_heads=64,
                          feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, dropout_rate=0.0,
                          relative_attention_num_buckets=32, relative_attention_max_distance=128)
        m = UMT5EncoderModel(conf).eval().to(dt)
        L, n = a.umt5_tokens, a.umt5_seq_len or a.umt5_tokens
        ids = torch.randint(0, 32100, (1, L)); mask = (torch.arange(L) < n).long()[None]
        r = timeit(lambda: [m(ids, mask).last_hidden_state for _ in range(2)], a.runs, a.warmup)
        r.update(tokens=L, seq_len=n, layers=a.layers, peak_rss_gb=peak_rss_gb())
        res["umt5"] = r
        del m
    if "wanvae" in only:
        from diffusers import AutoencoderKLWan
        v = AutoencoderKLWan(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
                             temperal_downsample=[False, True, True], dropout=0.0).eval().to(dt)
        lf, lh, lw = (int(s) for s in a.vae_latent.split(","))
        z = torch.randn(1, 16, lf, lh, lw).to(dt)
        r = timeit(lambda: v.decode(z).sample, a.runs, a.warmup)
        r.update(latent=[lf, lh, lw], peak_rss_gb=peak_rss_gb())
        res["wanvae"] = r
        del v
print(json.dumps(res))
