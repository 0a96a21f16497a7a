"""Turn a released MotionBricks Lightning checkpoint into the layout `kinema convert motionbricks`
reads: `model.safetensors` holding the checkpoint's `state_dict` with the same keys.

Run once per model (root, pose, vqvae), in a trusted Python environment with torch and
safetensors installed: a `.ckpt` is a pickle, which can run code when loaded, so kinema itself
never reads one.

    python reference/motionbricks_ckpt_to_safetensors.py \
        out/motionbricks_root/version_1/checkpoints/last.ckpt out/motionbricks_root/version_1/model.safetensors

The folder must also hold upstream's `config.yaml` and `stats/motion/{mean,std}.npy` beside it
(they ship with the checkpoint). The output is written to a temporary file and renamed.
"""

import argparse
import os
from pathlib import Path

import torch
from safetensors.torch import save_file


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ckpt", type=Path, help="the Lightning .ckpt")
    ap.add_argument("out", type=Path, help="model.safetensors to write")
    a = ap.parse_args()
    ck = torch.load(a.ckpt, map_location="cpu", weights_only=False)
    sd = ck["state_dict"] if isinstance(ck, dict) and "state_dict" in ck else ck
    if not isinstance(sd, dict) or not sd:
        raise SystemExit(f"{a.ckpt}: no state_dict found")
    tensors = {}
    for k, v in sd.items():
        if not torch.is_tensor(v):
            raise SystemExit(f"{a.ckpt}: state_dict entry {k!r} is not a tensor")
        tensors[k] = v.detach().contiguous().clone()
    tmp = a.out.with_name(a.out.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"source": a.ckpt.name})
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
