"""Generates the inputs of crates/ordo/tests/tiresias_compat.rs (the Tiresias simulator CSV
format) in the current directory. Seeded: running it again writes the same files (Python 3)."""
import random

MODELS = ['vgg19', 'vgg16', 'vgg11', 'alexnet', 'resnet152', 'resnet101', 'resnet50', 'inception4', 'inception3']

def write(path, jobs):
    # jobs: list of (submit, gpus, duration) in file order, submits non-decreasing
    with open(path, 'w') as f:
        f.write('job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n')
        for i, (s, g, d) in enumerate(jobs):
            nxt = jobs[i + 1][0] if i + 1 < len(jobs) else s
            f.write('%d,%d,%d,%d,%s,%d,%d\n' % (i, g, s, 100 + i, MODELS[i % len(MODELS)], d, nxt - s))

def sizes(rng, weights):
    vals = [v for v, _ in weights]
    ws = [w for _, w in weights]
    return rng.choices(vals, ws)[0]

def dur(rng, lo, hi):
    # log-uniform whole seconds
    import math
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))

def gen(seed, n, gap, weights, lo, hi, burst=1, first=0):
    rng = random.Random(seed)
    t = first
    jobs = []
    while len(jobs) < n:
        for _ in range(burst):
            if len(jobs) < n:
                jobs.append((t, sizes(rng, weights), dur(rng, lo, hi)))
        t += max(1, int(round(rng.expovariate(1.0 / gap))))
    return jobs

GANGS = [(1, 20), (2, 10), (4, 15), (8, 25), (16, 15), (32, 10), (64, 5)]
# 64 GPUs (8 x 8): big gangs, long jobs, arrivals ~15 min apart
write('gangs_sparse.csv', gen(1, 48, 900, GANGS, 300, 30000))
# 128 GPUs (16 x 8): the same shapes arriving every ~30 s
write('gangs_dense.csv', gen(2, 150, 30, GANGS + [(128, 2)], 60, 20000))
# 128 GPUs: ten huge gangs, hours long, far apart: demotions come from queue jumps alone
write('few_events.csv', gen(3, 10, 3000, [(16, 1), (32, 2), (64, 2), (96, 1), (128, 1)], 2000, 40000))
# 64 GPUs: bursts of 10 jobs in the same second (arrival order decides ties)
write('bursts.csv', gen(4, 80, 2000, GANGS, 100, 20000, burst=10))
# 1,024 GPUs (128 x 8): a Philly-like mix, mostly small jobs, some large gangs, overloaded
MIX = [(1, 55), (2, 10), (4, 10), (8, 12), (16, 6), (32, 4), (64, 2), (128, 1)]
write('mixed_load.csv', gen(5, 1500, 25, MIX, 30, 100000))
