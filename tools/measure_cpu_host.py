"""Measures this machine as a dcp cluster of CPU ranks and writes the
ClusterSpec JSON (docs/CLUSTERS.md) the planner and dcp-bench read.

Each figure is timed here, with torch on one thread per rank as dcp-train
and the agents run it (Debian's python3 with python3-torch):

- peak_flops, gemm_eff_half_tokens: fp32 GEMMs of t tokens x hidden x 4
  hidden for t = 16 .. 4096; 1 / rate = a + b / t is fitted by least
  squares (the cost model's efficiency t / (t + half) at gemm_eff_max 1):
  peak = 1 / a, half = b / a.
- attn_eff_max, attn_eff_half_tokens: softmax(q k^T) v over `heads` heads
  of `head_dim` for s = 128 .. 4096, as a fraction of that peak. The same
  fit; on a CPU attention gets no faster with length (the scores stop
  fitting in cache), so a fit whose half comes out negative keeps the
  longest length's fraction with half 0.
- intra_node_bw, intra_node_latency_s: all-to-all over torch.distributed
  Gloo between `ranks` local processes: the time of a one-float one, and
  the bytes each rank sends a second at 4M floats, that latency taken off. Every rank is on this host, so
  inter_node_* are the same.
- grad_sync_bw: an all-reduce of 4M floats (message bytes a second).
- overhead_per_layer_s: one layer's ops (norm, four projections, softmax,
  MLP) forward and backward on 8 tokens of width 64, less their flops at
  the peak: what dispatching a layer's ops costs, whatever its arithmetic.
- hbm_bytes: not measured, the memory a rank may use (--memory_cap_bytes),
  with usable_fraction 1; gpus_per_node: --ranks.

  /usr/bin/python3 tools/measure_cpu_host.py --out=data/clusters/cpu-host.json
  /usr/bin/python3 tools/measure_cpu_host.py --quick --out=/tmp/c.json  # seconds

Prints each measurement to stderr. The machine should be otherwise idle:
other processes on its cores make every rate lower.
"""

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def seconds(fn, min_time):
    """Mean seconds of fn() over enough repetitions to take min_time."""
    fn()
    reps, start = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / reps


def fit_inverse(xs, rates):
    """Least squares of 1 / rate = a + b / x; returns (a, b)."""
    us = [1.0 / x for x in xs]
    vs = [1.0 / r for r in rates]
    n = len(us)
    mu, mv = sum(us) / n, sum(vs) / n
    suu = sum((u - mu) ** 2 for u in us)
    b = sum((u - mu) * (v - mv) for u, v in zip(us, vs)) / suu
    return mv - b * mu, b


def gemm(hidden, tokens, min_time):
    rates = []
    for t in tokens:
        a, w = torch.randn(t, hidden), torch.randn(hidden, 4 * hidden)
        s = seconds(lambda: torch.matmul(a, w), min_time)
        rates.append(2.0 * t * hidden * 4 * hidden / s)
        print("gemm %5d tokens x %d x %d: %.2f GFLOP/s"
              % (t, hidden, 4 * hidden, rates[-1] / 1e9), file=sys.stderr)
    a, b = fit_inverse(tokens, rates)
    return 1.0 / a, max(0.0, b / a)


def attention(heads, head_dim, lengths, peak, min_time):
    fractions = []
    for s in lengths:
        q, k, v = (torch.randn(heads, s, head_dim) for _ in range(3))
        scale = head_dim ** -0.5

        def run():
            return torch.softmax(q @ k.transpose(1, 2) * scale, dim=-1) @ v

        rate = 4.0 * heads * s * s * head_dim / seconds(run, min_time)
        fractions.append(rate / peak)
        print("attention %5d tokens: %.2f GFLOP/s (%.3f of peak)"
              % (s, rate / 1e9, fractions[-1]), file=sys.stderr)
    a, b = fit_inverse(lengths, fractions)
    if b < 0 or a <= 0:
        return fractions[-1], 0.0
    return min(1.0, 1.0 / a), b / a


def layer_overhead(hidden, peak, min_time):
    x = torch.randn(8, hidden, requires_grad=True)
    ws = [torch.randn(hidden, hidden, requires_grad=True) for _ in range(4)]
    up = torch.randn(hidden, 4 * hidden, requires_grad=True)
    down = torch.randn(4 * hidden, hidden, requires_grad=True)

    def run():
        h = torch.nn.functional.layer_norm(x, (hidden,))
        q, k, v, o = (h @ w for w in ws)
        a = torch.softmax(q @ k.T, dim=-1) @ v @ ws[3]
        y = (torch.relu((a + o) @ up) @ down).sum()
        y.backward()

    flops = 3 * 2 * 8 * hidden * hidden * (4 + 8)
    return max(0.0, seconds(run, min_time) - flops / peak)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collectives(rank, world, port, floats, reps, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    def timed(fn):
        fn()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) / reps

    send, recv = torch.ones(floats), torch.empty(floats)
    one, one_out = torch.ones(world), torch.empty(world)
    a2a = timed(lambda: dist.all_to_all_single(recv, send))
    latency = timed(lambda: dist.all_to_all_single(one_out, one))
    reduce = timed(lambda: dist.all_reduce(send))
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"a2a_s": a2a, "latency_s": latency,
                       "all_reduce_s": reduce}, f)
    dist.destroy_process_group()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", default="cpu-host")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--memory_cap_bytes", type=float, default=2e9)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head_dim", type=int, default=64)
    parser.add_argument("--quick", action="store_true",
                        help="short timings and small sizes (a smoke run)")
    args = parser.parse_args(argv)
    if args.ranks < 2:
        parser.error("--ranks must be at least 2 (the collectives need two)")
    if not args.memory_cap_bytes > 0:
        parser.error("--memory_cap_bytes must be positive")
    torch.set_num_threads(1)
    min_time = 0.05 if args.quick else 0.5
    tokens = [16, 64, 256, 1024] if args.quick else [16, 32, 64, 128, 256,
                                                     512, 1024, 2048, 4096]
    lengths = [128, 512] if args.quick else [128, 256, 512, 1024, 2048, 4096]
    peak, half = gemm(args.hidden, tokens, min_time)
    attn_max, attn_half = attention(args.heads, args.head_dim, lengths, peak,
                                    min_time)
    overhead = layer_overhead(64, peak, min_time)

    floats = (1 << 20) if args.quick else (4 << 20)
    result = args.out + ".collectives.json"
    mp.spawn(collectives, nprocs=args.ranks,
             args=(args.ranks, free_port(), floats, 3 if args.quick else 10,
                   result))
    with open(result) as f:
        c = json.load(f)
    os.remove(result)
    sent = (args.ranks - 1) / args.ranks * 4.0 * floats
    # The large all-to-all's time less the latency is its transfer; where
    # the latency does not stay below it (a loaded machine), the whole.
    transfer = c["a2a_s"] - c["latency_s"]
    a2a_bw = sent / (transfer if transfer > 0.5 * c["a2a_s"] else c["a2a_s"])
    sync_bw = 4.0 * floats / c["all_reduce_s"]
    print("all-to-all: %.3f GB/s a rank, %.1f us for one float; all-reduce "
          "%.3f GB/s" % (a2a_bw / 1e9, c["latency_s"] * 1e6, sync_bw / 1e9),
          file=sys.stderr)

    spec = {
        "name": args.name,
        "peak_flops": peak,
        "hbm_bytes": args.memory_cap_bytes,
        "usable_fraction": 1.0,
        "gpus_per_node": args.ranks,
        "intra_node_bw": a2a_bw,
        "intra_node_latency_s": c["latency_s"],
        "inter_node_bw": a2a_bw,
        "inter_node_latency_s": c["latency_s"],
        "gemm_eff_max": 1.0,
        "gemm_eff_half_tokens": half,
        "attn_eff_max": attn_max,
        "attn_eff_half_tokens": attn_half,
        "overhead_per_layer_s": overhead,
        "grad_sync_bw": sync_bw,
        # One core computes and copies Gloo's messages: a ring's passes add
        # to its attention instead of hiding behind it.
        "ring_overlaps_attention": False,
    }
    with open(args.out, "w") as f:
        json.dump(spec, f, indent=1)
        f.write("\n")
    print(json.dumps(spec), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
