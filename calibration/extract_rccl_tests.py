#!/usr/bin/env python3
"""All-reduce latencies from an rccl-tests / nccl-tests ``all_reduce_perf`` log.

Maintainer tool (not a runtime dependency of inference_factory). Parses the text an
``all_reduce_perf`` run prints (size, count, type, redop, root, then time / algbw / busbw /
#wrong out-of-place and in-place) and writes the device's ``allreduce.csv`` in the schema of
``calibration/extract_aiconfigurator.py`` (kernel, num_gpus, message_bytes, dtype,
latency_us, backend, version, kernel_source), plus a row of ``MANIFEST-rccl.csv``:

    python calibration/extract_rccl_tests.py calibration/data/rccl_tests_all_reduce_8x_mi300x.txt \
        --device MI300X --num-gpus 8 --version "rccl-tests ae3e635" [--out hardware/measured]

The bundled log is AMD's published run on 8 MI300X (ROCm/ROCm docs, see the file's header).

Selection: kernel = "nccl" (the engine's name for the collective library's all-reduce; RCCL is
AMD's port of NCCL with the same algorithms); latency_us = the FASTEST of the out-of-place and
in-place times per size (as the NVIDIA extraction keeps the fastest kernel per key); sizes
below MIN_BYTES are dropped: the smallest NVIDIA NCCL row is 512 B, and rccl-tests' 8-32 B
rows (17-19 us, above every size up to 16 KB: launch noise of a 2-8 element reduction) would
raise the table's monotone latency envelope over every decode-sized message.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

MIN_BYTES = 512
COLS = ["kernel", "num_gpus", "message_bytes", "dtype", "latency_us", "backend", "version",
        "kernel_source"]
#: rccl-tests type names -> the tables' dtype names
DTYPES = {"float": "fp32", "half": "fp16", "bfloat16": "bf16"}


def parse_log(text: str) -> list[dict]:
    """The data rows of an all_reduce_perf log: size (B), type, and the out-of-place and
    in-place (time us, algbw GB/s, busbw GB/s)."""
    rows = []
    for line in text.splitlines():
        f = line.split()
        if line.lstrip().startswith("#") or len(f) < 13 or not f[0].isdigit():
            continue
        rows.append({"size": int(f[0]), "type": f[2], "redop": f[3],
                     "oop": tuple(float(x) for x in f[5:8]),
                     "ip": tuple(float(x) for x in f[9:12])})
    if not rows:
        raise ValueError("no all_reduce_perf data rows found")
    return rows


def table_rows(rows, num_gpus: int, version: str) -> list[list]:
    out = []
    for r in rows:
        if r["size"] < MIN_BYTES or r["redop"] != "sum":
            continue
        t, which = min((r["oop"][0], "out-of-place"), (r["ip"][0], "in-place"))
        out.append(["nccl", num_gpus, r["size"], DTYPES.get(r["type"], r["type"]), "%.4g" % t,
                    "rccl", version, f"rccl all_reduce_perf {which} (rccl-tests)"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--device", required=True)
    ap.add_argument("--num-gpus", type=int, required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", default="hardware/measured")
    a = ap.parse_args(argv)
    text = open(a.log).read()
    src = []                      # the log's leading comment block (its provenance)
    for ln in text.splitlines():
        if not ln.startswith("# "):
            break
        src.append(ln[2:])
    rows = table_rows(parse_log(text), a.num_gpus, a.version)
    path = os.path.join(a.out, a.device, "allreduce.csv")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        f.write(f"# RCCL measured latencies: allreduce on {a.device} ({a.num_gpus} GPUs, one node)\n")
        f.writelines(f"# {s}\n" for s in src)
        f.write(f"# Log: {os.path.basename(a.log)} (calibration/data); extracted by "
                "calibration/extract_rccl_tests.py\n"
                "# Units: latency_us = microseconds (rccl-tests 'time', mean over 20 iterations "
                "after 5 warm-up), written %.4g; message_bytes = rccl-tests size in bytes\n"
                f"# Selection: kernel=nccl (RCCL, the collective library; no custom all-reduce "
                f"rows: the engine falls back to these); fastest of out-of-place / in-place per "
                f"size; sizes >= {MIN_BYTES} B; dtype = the run's type (float -> fp32: a "
                "reduction's cost is its bytes)\n"
                "# Key: kernel,num_gpus,message_bytes,dtype (unique); provenance columns: "
                "backend,version,kernel_source\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLS)
        w.writerows(rows)
    man = os.path.join(a.out, "MANIFEST-rccl.csv")
    keep = []
    if os.path.exists(man):
        with open(man) as f:
            keep = [ln for ln in f.read().splitlines()[2:] if not ln.startswith(f"{a.device},")]
    with open(man, "w") as f:
        f.write("# RCCL all-reduce tables from rccl-tests logs (calibration/extract_rccl_tests.py)\n")
        f.write("device,family,rows,backends,versions,source_paths\n")
        for ln in sorted(keep + [f"{a.device},allreduce,{len(rows)},rccl,{a.version},"
                                 f"calibration/data/{os.path.basename(a.log)}"]):
            f.write(ln + "\n")
    print(a.device, "allreduce", len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
