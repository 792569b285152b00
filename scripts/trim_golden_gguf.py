#!/usr/bin/env python3
"""Copy the part of ../shared/golden_gguf the tests use into tests/data/golden_gguf (standard
library only): blocks/ whole; per model case one .gguf file, its case.json entry and its rows of
dequant_samples.safetensors.

    python3 scripts/trim_golden_gguf.py /work/shared/golden_gguf tests/data/golden_gguf
"""
import json, os, shutil, struct, sys

KEEP = {"cogvideox": "Q4_0", "wan": "Q4_K_S"}


def trim_safetensors(src, dst, prefix):
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out, blobs, off = {}, [], 0
    for name in sorted(k for k in header if k.startswith(prefix)):
        e = header[name]
        b, en = e["data_offsets"]
        blobs.append(data[b:en])
        out[name] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [off, off + en - b]}
        off += en - b
    hj = json.dumps(out, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))


def main(src, dst):
    os.makedirs(os.path.join(dst, "blocks"), exist_ok=True)
    for f in ("blocks.safetensors", "case.json"):
        shutil.copyfile(os.path.join(src, "blocks", f), os.path.join(dst, "blocks", f))
    for case, ft in KEEP.items():
        d = os.path.join(dst, case)
        os.makedirs(d, exist_ok=True)
        cj = json.load(open(os.path.join(src, case, "case.json")))
        files = [f for f in cj["files"] if f["ftype"] == ft]
        json.dump({"description": cj["description"], "gguf_arch": cj["gguf_arch"], "files": files},
                  open(os.path.join(d, "case.json"), "w"), indent=1)
        for f in files:
            shutil.copyfile(os.path.join(src, case, f["file"]), os.path.join(d, f["file"]))
        trim_safetensors(os.path.join(src, case, "dequant_samples.safetensors"),
                         os.path.join(d, "dequant_samples.safetensors"), ft + "/")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
