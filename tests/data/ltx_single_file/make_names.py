#!/usr/bin/env python3
"""Name pairs (original LTX-Video single-file key -> diffusers key) for tests/weights_ltx.c, made by
diffusers' own convert_ltx_vae_checkpoint_to_diffusers (src/diffusers/loaders/single_file_utils.py at
v0.35.2, read from the diffusers mirror and run here on key names only: no torch needed).

For every tensor of a tiny diffusers VAE, candidate original names are generated (each up/down
block index 0-9 for the block part, the common renames undone or not, the real files' spelling first) and run through the upstream
function with the layout forced (0.9.0: encoder conv_out input width 16; 0.9.5: 2048); the first
candidate (in generation order) that converts to the diffusers name is written.

usage: make_names.py DIFFUSERS_MIRROR_GIT VAE_SAFETENSORS VARIANT(90|95) > names_VARIANT.txt
"""
import ast, itertools, json, re, struct, subprocess, sys

repo, vae, variant = sys.argv[1], sys.argv[2], int(sys.argv[3])
src = subprocess.run(["git", "-C", repo, "show", "v0.35.2:src/diffusers/loaders/single_file_utils.py"],
                     check=True, capture_output=True, text=True).stdout
tree = ast.parse(src)
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "convert_ltx_vae_checkpoint_to_diffusers")
ns = {}
exec(compile(ast.Module(body=[fn], type_ignores=[]), "single_file_utils.py", "exec"), ns)
convert = ns["convert_ltx_vae_checkpoint_to_diffusers"]


class Shape:
    def __init__(self, shape): self.shape = shape


def upstream(orig):
    probe = "vae.encoder.conv_out.conv.weight"
    ck = {probe: Shape([17, 2048 if variant == 95 else 16, 3, 3, 3])}
    mark = ck[probe] if orig == probe else Shape([1])
    ck[orig] = mark
    out = convert(ck)
    got = [k for k, v in out.items() if v is mark]
    return got[0] if got else None


with open(vae, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
names = sorted(k for k in header if k != "__metadata__")

BLOCK = re.compile(r"^(decoder|encoder)\.(mid_block|up_blocks\.\d(?:\.upsamplers\.0|\.conv_in)?|"
                   r"down_blocks\.\d(?:\.downsamplers\.0|\.conv_out)?)(\..*)$")
TAIL = [("resnets", "res_blocks"), ("conv_shortcut.conv", "conv_shortcut"), ("norm3", "norm3.norm"),
        ("time_embedder", "last_time_embedder"), ("scale_shift_table", "last_scale_shift_table")]
TOP = {"latents_mean": "per_channel_statistics.mean-of-means", "latents_std": "per_channel_statistics.std-of-means"}


def tails(t, rules):
    for mask in itertools.product([1, 0], repeat=len(rules)):   # the renames undone first: the real files' names
        s = t
        for (a, b), m in zip(rules, mask):
            if m: s = s.replace(a, b)
        yield s


def candidates(d):
    if d in TOP:
        yield "vae." + TOP[d]
        return
    m = BLOCK.match(d)
    if not m:
        for t in tails(d, TAIL): yield "vae." + t   # top level: last_time_embedder, last_scale_shift_table
        return
    side, kind = m.group(1), "up_blocks" if m.group(1) == "decoder" else "down_blocks"
    for i in range(10):
        for t in tails(m.group(3), TAIL[:3]): yield "vae.%s.%s.%d%s" % (side, kind, i, t)


for d in names:
    hit = next((c for c in candidates(d) if upstream(c) == d), None)
    if hit is None: sys.exit("no original name converts to " + d)
    print(hit, d)
