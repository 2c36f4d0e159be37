"""Bandwidth of dcp.torch's Ulysses layout changes (torch ops: a reshape,
a permute and a copy), for the shapes kernels/ulysses_layout_benchmark
measures the CUDA kernels on, so that one device run says whether the
kernels are worth keeping on the training path:

  python3 tools/device/layout_torch_benchmark.py [--iterations=50]
      [--warmup=5] [--device=cuda]

Per shape and direction it prints the bytes read plus the bytes written,
the median time of --iterations runs after --warmup (CUDA events on the
current stream; wall time on the CPU), the bandwidth that makes, and that
as a fraction of a device copy of the same bytes timed the same way (the
kernels' benchmark reports the same fraction). The directions are the ones
dcp.torch runs around each all-to-all (dcp/torch.py): sequence to heads
builds the send buffer [p, s/p, n/p, d] from a shard [s/p, n, d]; heads to
sequence turns the received [p, s/p, n/p, d] back into [s/p, n, d]. Without
CUDA (and no --device=cpu) it prints a line saying so and exits 0.
"""

import argparse
import statistics
import sys

import torch

from device_timing import seconds_of

# name, group size p, heads n, head dim d, pack tokens s, dtype: the query
# shapes of kernels/ulysses_layout_benchmark_main.cc (keys and values are
# the same operation on fewer heads).
SHAPES = [
    ("70B-like: 64 heads, p=8", 8, 64, 128, 32768, torch.bfloat16),
    ("the same in float32", 8, 64, 128, 32768, torch.float32),
    ("8B-like: 32 heads, p=4", 4, 32, 128, 32768, torch.bfloat16),
    ("head_dim 64, 16 heads, p=8, 128k tokens", 8, 16, 64, 131072,
     torch.bfloat16),
]


def seq_to_heads(x, p):
    s_local, n, d = x.shape
    return x.reshape(s_local, p, n // p, d).permute(1, 0, 2, 3).contiguous()


def heads_to_seq(x, p):
    _, s_local, n_local, d = x.shape
    return x.permute(1, 0, 2, 3).reshape(s_local, p * n_local, d)


def median_seconds(run, device, iterations, warmup):
    for _ in range(warmup):
        run()
    return statistics.median(seconds_of(run, device == "cuda")
                             for _ in range(iterations))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--scale", type=int, default=1,
                        help="divide every pack's tokens by this (a quick "
                             "CPU run)")
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.warmup < 0 or args.scale < 1:
        parser.error("--iterations >= 1, --warmup >= 0 and --scale >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("layout_torch_benchmark: torch sees no CUDA device; nothing "
              "measured")
        return 0
    print("%-42s %-14s %10s %10s %8s %9s" % (
        "shape", "direction", "MB moved", "median us", "GB/s", "of copy"))
    for name, p, n, d, tokens, dtype in SHAPES:
        s_local = tokens // args.scale // p
        shard = torch.randn(s_local, n, d, device=args.device).to(dtype)
        received = seq_to_heads(shard, p)
        # Each direction reads its input and writes its output once.
        moved = 2 * shard.numel() * shard.element_size()
        copy = median_seconds(lambda: shard.clone(), args.device,
                              args.iterations, args.warmup)
        for direction, run in (
                ("seq->heads", lambda: seq_to_heads(shard, p)),
                ("heads->seq", lambda: heads_to_seq(received, p))):
            seconds = median_seconds(run, args.device, args.iterations,
                                     args.warmup)
            print("%-42s %-14s %10.1f %10.1f %8.1f %9.2f" % (
                name, direction, moved / 1e6, seconds * 1e6,
                moved / seconds / 1e9, copy / seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
