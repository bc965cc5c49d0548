"""DeepSeek-V3 decode on H800, EP144 (DeepSeek's production decode unit): the best tokens/s
per GPU that meets a TPOT bound, at MTP draft depth 0, 1 and 2, with the per-resource times
of that point.

    python validation/ds_h800_decode_table.py                 # this checkout's engine
    PYTHONPATH=/path/to/other/checkout/src python validation/ds_h800_decode_table.py

Deployment facts (shared/reference/deployments.csv, DS_DAY6): 18 nodes x 8 H800, attention
DP144, routed experts EP144 with 32 redundant experts; mean KV length per output token 4,989.
Searched: the batch and the overlap policy (none or two-batch) with the best tokens/s/GPU
meeting the bound. Assumed: FP8 weights, BF16 KV, MTP acceptance 0.85 per position (DeepSeek
reports 85-90 % for the second token, kernels.csv). A point of view, not a fit.
"""

import argparse

import numpy as np

import inference_factory as inf

BATCHES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpot-ms", type=float, nargs="+", default=[50.0, 30.0])
    ap.add_argument("--redundant-experts", type=int, default=32)
    args = ap.parse_args()
    ds = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=144, ep=144,
                      redundant_experts=args.redundant_experts, overlap=["none", "two-batch"],
                      weight_precision="fp8", batch_size=BATCHES, kv_len=4989,
                      draft_depth=[0, 1, 2], acceptance_rate=0.85)
    print(f"engine: {inf.__file__}  mode: {ds.attrs.get('mode')}")
    print(f"{'TPOT<=':>7} {'depth':>5} {'overlap':>9} {'batch':>5} {'tok/s/GPU':>9} {'TPOT ms':>7} "
          f"{'compute':>8} {'memory':>8} {'comm':>8} {'overhead':>8} {'draft':>8} {'binding':>8}"
          "   (resource times in ms per step)")
    for tpot in args.tpot_ms:
        for d in (0, 1, 2):
            sel = ds.sel(draft_depth=d).transpose("overlap", "batch_size")
            ok = (sel.tpot_s <= tpot / 1e3) & sel.fits
            thr = sel.decode_tokens_per_s_per_gpu.where(ok)
            if not bool(ok.any()):
                print(f"{tpot:7.0f} {d:5d}   none meets the bound")
                continue
            o, b = np.unravel_index(int(np.nanargmax(thr.values)), thr.shape)
            p = sel.isel(overlap=o, batch_size=b)
            ms = {r: 1e3 * float(p[f"decode_{r}_s"]) for r in
                  ("compute", "memory", "comm", "overhead", "draft")}
            print(f"{tpot:7.0f} {d:5d} {str(p.overlap.values):>9} {BATCHES[b]:5d} "
                  f"{float(p.decode_tokens_per_s_per_gpu):9.0f} "
                  f"{1e3 * float(p.tpot_s):7.1f} {ms['compute']:8.1f} {ms['memory']:8.1f} "
                  f"{ms['comm']:8.1f} {ms['overhead']:8.1f} {ms['draft']:8.1f} "
                  f"{str(p.decode_binding_resource.values):>8}")


if __name__ == "__main__":
    main()
