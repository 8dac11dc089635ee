#!/usr/bin/env python3
"""Writes a trace in the input layout of the Lucid simulator (ASPLOS'23, S-Lab-System-Group/Lucid),
so that Lucid and ordo can be run side by side on the same jobs (docs/POLICIES.md, "Lucid").

Input: ordo's generic CSV (`ordo trace convert TRACE --to generic --out jobs.csv [SELECTION]`).
Output, in OUT_DIR: `cluster_full_log.csv` and `vc_config.csv`, the two files Lucid's
`simulator.py -e Venus_Sept -t OUT_DIR` reads.

- Lucid's Venus experiment keeps jobs submitted from 2020-09-01 00:00:00 to 2020-09-26 23:59:00,
  counting from the first job of the file, which it expects at 2020-04-01 00:00:00 (Venus's
  first day). So every job is written at 2020-09-01 00:00:00 + its submit time, and one extra
  1-GPU job of 1 s at 2020-04-01 00:00:00 (outside the window: Lucid drops it before it simulates).
- Lucid steps its clock by whole seconds and ends a job when the clock equals its end: submit
  times and run times must be whole seconds. A fractional run time is rounded up (`--ceil`) or
  refused. Submit times must already be whole seconds.
- Every job goes to one virtual cluster `vc` of `--nodes` nodes of 8 GPUs (Lucid's only node size),
  or, with `--vc-sizes FILE` (CSV `vc,nodes`), to the VC named by the job's `group`.
- Columns Lucid reads only for its own policy (dataset, model, batch size, AMP, speed, GPU and
  GPU-memory utilisation) get one fixed profile: FIFO, SJF, SRTF and Tiresias never read them.

Usage: lucid-input.py jobs.csv OUT_DIR --nodes 64 [--ceil]
"""
import argparse
import csv
import datetime
import math
import os
import sys

WINDOW_START = datetime.datetime(2020, 9, 1)
TRACE_START = datetime.datetime(2020, 4, 1)
COLUMNS = [
    "job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "state", "submit_time", "duration",
    "dataset", "model", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem",
]
PROFILE = ["ImageNet", "ResNet18", 32, 0, 1.0, 50.0, 20.0, 4000]


def whole(x, what, line, ceil):
    v = float(x)
    if v != math.floor(v):
        if not ceil:
            sys.exit(f"line {line}: {what} {x} is not a whole number of seconds (give --ceil)")
        return math.ceil(v)
    return int(v)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("generic")
    p.add_argument("out_dir")
    p.add_argument("--nodes", type=int, help="one VC of this many 8-GPU nodes")
    p.add_argument("--vc-sizes", help="CSV vc,nodes: one VC per job group")
    p.add_argument("--ceil", action="store_true", help="round fractional run times up to whole seconds")
    a = p.parse_args()
    if (a.nodes is None) == (a.vc_sizes is None):
        sys.exit("give --nodes N or --vc-sizes FILE")
    sizes = {"vc": a.nodes} if a.nodes else {r["vc"]: int(r["nodes"]) for r in csv.DictReader(open(a.vc_sizes))}
    os.makedirs(a.out_dir, exist_ok=True)
    with open(a.generic) as f, open(os.path.join(a.out_dir, "cluster_full_log.csv"), "w", newline="") as o:
        w = csv.writer(o)
        w.writerow(COLUMNS)
        first_vc = next(iter(sizes))
        w.writerow([-1, "u", first_vc, "j", 1, 1, "COMPLETED", TRACE_START.strftime("%Y-%m-%d %H:%M:%S"), 1] + PROFILE)
        for n, r in enumerate(csv.DictReader(f), start=2):
            vc = "vc" if a.nodes else r["group"]
            if vc not in sizes:
                sys.exit(f"line {n}: group {vc!r} has no size in {a.vc_sizes}")
            submit = whole(r["submit_time"], "submit_time", n, False)
            duration = whole(r["duration"], "duration", n, a.ceil)
            gpus = int(float(r["num_gpu"]))
            if gpus < 1 or duration < 1:
                continue
            at = WINDOW_START + datetime.timedelta(seconds=submit)
            w.writerow([n - 2, r.get("user") or "u", vc, "j", gpus, 1, "COMPLETED",
                        at.strftime("%Y-%m-%d %H:%M:%S"), duration] + PROFILE)
    with open(os.path.join(a.out_dir, "vc_config.csv"), "w") as o:
        o.write(",num\n")
        for vc, nodes in sizes.items():
            o.write(f"{vc},{nodes}\n")


if __name__ == "__main__":
    main()
