#!/usr/bin/env python3
"""Converts a trace of the Gavel simulator (OSDI'20, stanford-futuredata/gavel) and Gavel's
throughput matrix into ordo's inputs, so that both simulators run the same jobs on the same
heterogeneous cluster (docs/POLICIES.md, "Side by side with Gavel").

Usage:
  gavel-to-ordo.py TRACE THROUGHPUTS_JSON OUT_DIR [--cluster 36:36:36] [--gpus-per-server 1:1:1]
                   [--reference v100] [--order v100,p100,k80]

TRACE is what Gavel's `scheduler/scripts/utils/generate_trace.py --output_file` writes (the
format its `simulate_scheduler_with_trace.py -t` reads): one job per line, ten tab-separated
fields `job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps,
scale_factor, priority_weight, SLO, arrival_time`. THROUGHPUTS_JSON is Gavel's
`scheduler/simulation_throughputs.json`: worker type -> "('JOB_TYPE', SCALE_FACTOR)" ->
{"null": steps per second alone on that worker type, ...co-located pairs, not read here}.

Writes into OUT_DIR:
- `jobs.csv`: ordo's generic CSV with `job_id,submit_time,num_gpu,duration,job_class,
  measured_on,gpu_model`. `job_id` is the job's line index from 0, the id Gavel gives it;
  `submit_time` its arrival time; `num_gpu` its scale factor; `job_class` the Gavel job type
  made a name (see below); `measured_on` the `--reference` model; `duration` = total_steps /
  (its throughput alone on the reference model), i.e. exactly how long Gavel would take to run
  it there. The default reference, V100, is the model Gavel's generator draws run times on
  (`generate_job(reference_worker_type='v100')`: total_steps = run time x V100 throughput), and
  the only one with a throughput for every job type. `gpu_model` is empty (any model) unless
  Gavel's matrix gives the job type a throughput of 0 on some model of the cluster (ResNet-50
  at batch size 128 on 2, 4 or 8 K80s: Gavel never schedules a job where its throughput is 0);
  then it lists the models it may use (`v100|p100`).
- `speeds.toml`: for `ordo --speeds`: one `[speeds.CLASS]` row per class in the trace, each
  model's throughput divided by the reference model's, so that ordo's run time on model m,
  duration x speed(reference) / speed(m) = total_steps / throughput(m), is Gavel's. ordo
  wants every row to name every model of the cluster with a speed above 0; where Gavel's
  throughput is 0 the row says `1e-09` (next to nothing, as Gavel's 0), with a comment: the
  class's jobs exclude that model through `gpu_model` (above), so ordo never reads it.
- prints the `--cluster` string for ordo: `--cluster` takes Gavel's `-c` counts
  (V100:P100:K80) and `--gpus-per-server` its `--num_gpus_per_server`; groups are written in
  `--order` (what `--model-pick first` walks).

Class names: the job type lowercased, "batch size N" shortened to `bsN`, other runs of
characters outside [a-z0-9] as `-`, and `-xK` added for a scale factor K > 1 (Gavel measures a
K-GPU job as its own row), e.g. `ResNet-50 (batch size 64)` -> `resnet-50-bs64`.

Bad input (a line without ten fields, a non-numeric or non-positive number, a job type with no
throughput or a throughput of 0 on the reference model or on every model of the cluster, a
priority weight other than 1, which ordo's orders do not read) stops the conversion with
FILE:LINE: field: what was expected.
"""
import argparse
import ast
import csv
import json
import os
import re
import sys

# The speed written where Gavel's throughput is 0 (ordo's speeds must be above 0; never read).
ZERO = 1e-9
GAVEL_ORDER = ["v100", "p100", "k80"]  # the order of Gavel's `-c V100:P100:K80`
FIELDS = [
    "job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
    "scale_factor", "priority_weight", "SLO", "arrival_time",
]


def fail(msg):
    sys.exit(f"gavel-to-ordo: {msg}")


def class_name(job_type, scale_factor):
    s = job_type.lower()
    s = re.sub(r"\(batch size (\d+)\)", r"bs\1", s)
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    if scale_factor > 1:
        s += f"-x{scale_factor}"
    return s


def number(text, where, field, kind, positive):
    try:
        v = kind(text)
    except ValueError:
        fail(f"{where}: {field}: expected {'a whole number' if kind is int else 'a number'}, found {text!r}")
    if v != v or v in (float("inf"), float("-inf")):
        fail(f"{where}: {field}: expected a finite number, found {text!r}")
    if positive and v <= 0:
        fail(f"{where}: {field}: expected a number > 0, found {text!r}")
    if not positive and v < 0:
        fail(f"{where}: {field}: expected a number >= 0, found {text!r}")
    return v


def read_throughputs(path):
    """worker type -> (job_type, scale_factor) -> steps/s alone."""
    try:
        with open(path) as f:
            raw = json.load(f)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    except json.JSONDecodeError as e:
        fail(f"{path}:{e.lineno}: not JSON: {e.msg}")
    if not isinstance(raw, dict):
        fail(f"{path}: expected a JSON object of worker types")
    out = {}
    for worker, rows in raw.items():
        if not isinstance(rows, dict):
            fail(f"{path}: {worker}: expected an object of job types")
        out[worker.lower()] = table = {}
        for key, row in rows.items():
            try:
                job_type, sf = ast.literal_eval(key)
            except (ValueError, SyntaxError, TypeError):
                fail(f"{path}: {worker}: key {key!r}: expected \"('JOB_TYPE', SCALE_FACTOR)\"")
            thr = row.get("null") if isinstance(row, dict) else None
            if not isinstance(thr, (int, float)) or isinstance(thr, bool):
                fail(f"{path}: {worker}: {key}: expected a number under \"null\", found {thr!r}")
            table[(job_type, int(sf))] = float(thr)
    return out


def throughput(thr, path, where, worker, key):
    v = thr[worker].get(key)
    if v is None:
        fail(f"{where}: job_type: {key[0]!r} at scale factor {key[1]} has no throughput on {worker} in {path}")
    if v < 0:
        fail(f"{path}: {worker}: {key}: throughput {v} is negative")
    return v


def triple(text, flag):
    parts = text.split(":")
    if len(parts) != 3:
        fail(f"{flag}: expected V100:P100:K80 (three whole numbers), found {text!r}")
    return {m: number(p, flag, m, int, False) for m, p in zip(GAVEL_ORDER, parts)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("throughputs")
    p.add_argument("out_dir")
    p.add_argument("--cluster", default="36:36:36", help="Gavel's -c: GPUs of V100:P100:K80")
    p.add_argument("--gpus-per-server", default="1:1:1", help="Gavel's --num_gpus_per_server")
    p.add_argument("--reference", default="v100", help="model every duration is measured on")
    p.add_argument("--order", default="v100,p100,k80", help="order of the --cluster groups")
    a = p.parse_args()

    thr = read_throughputs(a.throughputs)
    counts = triple(a.cluster, "--cluster")
    per = triple(a.gpus_per_server, "--gpus-per-server")
    models = [m for m in GAVEL_ORDER if counts[m] > 0]
    order = [m.strip().lower() for m in a.order.split(",")]
    if sorted(order) != sorted(GAVEL_ORDER):
        fail(f"--order: expected the three models v100, p100, k80 in some order, found {a.order!r}")
    ref = a.reference.lower()
    for m in models + [ref]:
        if m not in thr:
            fail(f"{a.throughputs}: no worker type {m!r} (has {', '.join(sorted(thr))})")
    groups = []
    for m in order:
        if counts[m] == 0:
            continue
        if per[m] <= 0 or counts[m] % per[m]:
            fail(f"--gpus-per-server: {m}: {per[m]} does not divide its {counts[m]} GPUs")
        groups.append(f"{counts[m] // per[m]}x{per[m]}:{m}")

    jobs, classes = [], {}
    try:
        f = open(a.trace)
    except OSError as e:
        fail(f"{a.trace}: {e.strerror}")
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{a.trace}:{n}"
            v = line.rstrip("\n").split("\t")
            if len(v) != len(FIELDS):
                fail(f"{where}: expected {len(FIELDS)} tab-separated fields ({', '.join(FIELDS)}), found {len(v)}")
            r = dict(zip(FIELDS, v))
            steps = number(r["total_steps"], where, "total_steps", int, True)
            sf = number(r["scale_factor"], where, "scale_factor", int, True)
            arrival = number(r["arrival_time"], where, "arrival_time", float, False)
            weight = number(r["priority_weight"], where, "priority_weight", float, True)
            if weight != 1.0:
                fail(f"{where}: priority_weight: expected 1 (ordo's orders read no per-job weight), found {r['priority_weight']!r}")
            key = (r["job_type"], sf)
            usable = [m for m in order if m in models and throughput(thr, a.throughputs, where, m, key) > 0]
            if throughput(thr, a.throughputs, where, ref, key) == 0:
                fail(f"{where}: job_type: {key} has throughput 0 on the reference model {ref} (give another --reference)")
            if not usable:
                fail(f"{where}: job_type: {key} has throughput 0 on every model of the cluster")
            name = class_name(*key)
            if classes.setdefault(name, key) != key:
                fail(f"{where}: job_type: {key} and {classes[name]} both make class {name!r}")
            if jobs and arrival < jobs[-1][1]:
                fail(f"{where}: arrival_time: {arrival} is before the previous job's {jobs[-1][1]} (Gavel requires them sorted)")
            only = "" if len(usable) == len(models) else "|".join(usable)
            jobs.append((len(jobs), arrival, sf, steps / thr[ref][key], name, only))
    if not jobs:
        fail(f"{a.trace}: no jobs")

    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "jobs.csv"), "w", newline="") as o:
        w = csv.writer(o, lineterminator="\n")
        w.writerow(["job_id", "submit_time", "num_gpu", "duration", "job_class", "measured_on", "gpu_model"])
        for jid, arrival, sf, dur, name, only in jobs:
            w.writerow([jid, f"{arrival:.6f}", sf, f"{dur:.6f}", name, ref, only])
    with open(os.path.join(a.out_dir, "speeds.toml"), "w") as o:
        o.write(f"# Gavel throughputs ({os.path.basename(a.throughputs)}), relative to {ref}: "
                "written by scripts/gavel-to-ordo.py\n")
        for name in sorted(classes):
            key = classes[name]
            o.write(f"\n# {key[0]}, scale factor {key[1]}\n[speeds.{name}]\n")
            for m in sorted(set(models + [ref])):
                if thr[m][key] > 0:
                    o.write(f"{m} = {thr[m][key] / thr[ref][key]!r}\n")
                else:
                    o.write(f"{m} = {ZERO!r}  # Gavel: throughput 0; this class's jobs exclude {m} (gpu_model)\n")
    print(",".join(groups))
    print(f"{len(jobs)} jobs, {len(classes)} classes, durations on {ref}", file=sys.stderr)


if __name__ == "__main__":
    main()
