"""dcp.torch.ring_attention's forward and backward on 2 Gloo rank processes
(a ring of 2, float32, 4 heads of 64, one torch thread a rank), over packs of
4,096 tokens: one sequence, one long sequence with short ones riding along,
and short ones only. Prints the median milliseconds of a call on rank 0.

    /usr/bin/python3 client_lib/python/ring_benchmark.py [DCP_SRC] [PORT]

DCP_SRC is the folder holding the dcp package (default: this checkout's
client_lib/python/src), so that two versions can be timed side by side."""

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PACKS = [("1 x 4096", [4096]),
         ("3072 + 32 x 32", [3072] + [32] * 32),
         ("2048 + 64 x 32", [2048] + [32] * 64),
         ("128 x 32", [32] * 128)]
HEADS, DIM, CALLS, WARMUP = 4, 64, 7, 2


def worker(rank, src, port, lengths, results):
    sys.path.insert(0, src)
    import dcp.torch as dt
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    layout = dt.PackLayout(lengths, 2, 1)
    ring = dist.new_group([0, 1])
    tokens = 2 * layout.chunk_tokens
    g = torch.Generator().manual_seed(rank)
    q, k, v = [torch.randn(tokens, HEADS, DIM, generator=g,
                           requires_grad=True) for _ in range(3)]
    times = []
    for _ in range(CALLS):
        dist.barrier()
        start = time.perf_counter()
        dt.ring_attention(q, k, v, layout, ring).sum().backward()
        times.append(time.perf_counter() - start)
    if rank == 0:
        results.put(statistics.median(times[WARMUP:]) * 1e3)
    dist.destroy_process_group()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "src")
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 29531
    for name, lengths in PACKS:
        results = mp.get_context("spawn").SimpleQueue()
        mp.spawn(worker, args=(src, port, lengths, results), nprocs=2)
        print("%-16s %8.1f ms" % (name, results.get()), flush=True)
        port += 1


if __name__ == "__main__":
    main()
