#!/usr/bin/env python3
"""Times forward+backward of the training model (examples/model.py) on one
device over a grid of (length, recompute) and writes a profile table, the CSV
that `dcp-plan --profile=` and the scheduler's cost model fit to
(scheduler/planner/cost_model.h, ParseProfileTable):

    length,group_size,recompute,intra_node,seconds,memory_bytes

One task of one sequence per row, on one GPU: group_size 1, intra_node 1.
``seconds`` is the median of --iters timed forward+backward passes after
--warmup untimed ones (CUDA events on the GPU, the wall clock on the CPU);
``memory_bytes`` the peak of torch.cuda.max_memory_allocated over one more
pass (weights, their gradients and the activations; no optimizer state), 0 on
the CPU, where it is not measured. Comment lines name the spec (`# spec:`,
which tools/device_check.sh hands dcp-plan as --model_config), the device and
the dtype.

    python3 tools/device/profile_model.py --device=cuda --out=profile.csv
    python3 tools/device/profile_model.py --device=cpu --lengths=64,128

The grid stops early rather than overrun: at --seconds (the rows so far are
kept, each written as soon as it is measured), at a length whose predicted
time would not fit in what is left, and at a length that runs out of device
memory (longer ones would too; the next recompute ratio carries on).
Exit status: 0 with at least one row written, 1 otherwise.
"""

import argparse
import os
import statistics
import sys
import time

from device_timing import seconds_of

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
HEADER = "length,group_size,recompute,intra_node,seconds,memory_bytes"

# Per device: the spec, dtype and lengths used when the flags give none.
DEFAULTS = {
    "cuda": ("data/models/gpu-small.json", "bfloat16",
             "512,1024,2048,4096,8192,16384"),
    "cpu": ("data/models/cpu-tiny.json", "float32", "64,128,256,512"),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("auto", "cuda", "cpu"),
                   default="auto", help="auto: cuda when torch sees a GPU")
    p.add_argument("--spec", help="model JSON, relative to the repo root "
                   "(default: per device, see DEFAULTS)")
    p.add_argument("--dtype", choices=("bfloat16", "float32", "float64"))
    p.add_argument("--lengths", help="comma-separated sequence lengths")
    p.add_argument("--recompute", default="0,0.5,1",
                   help="comma-separated recompute ratios in [0, 1]")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--seconds", type=float, default=120,
                   help="time budget of the whole grid")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="-", help="CSV file ('-': stdout)")
    args = p.parse_args(argv)
    if args.warmup < 0 or args.iters < 1:
        p.error("--warmup must be >= 0 and --iters >= 1")
    return args


def csv_ints(text, what):
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 2:
        raise ValueError("%s: expected integers >= 2, got %r" % (what, text))
    return sorted(values)


def csv_ratios(text):
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise ValueError("--recompute: expected ratios in [0, 1], got %r"
                         % text)
    return values


def is_oom(error):
    return isinstance(error, RuntimeError) and "out of memory" in str(error)


class Profiler:
    """Measures one (length, recompute) point of one model on one device."""

    def __init__(self, torch, model, vocab, device, warmup, iters, seed):
        self.torch, self.model, self.vocab = torch, model, vocab
        self.device, self.warmup, self.iters = device, warmup, iters
        self.gen = torch.Generator().manual_seed(seed)
        self.cuda = device == "cuda"

    def _sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def measure(self, length, recompute):
        """(median seconds, peak bytes) of forward+backward."""
        torch = self.torch
        tokens = torch.randint(self.vocab, (length + 1,), generator=self.gen)
        inputs = tokens[:-1].to(self.device)
        targets = tokens[1:].to(self.device)

        def step():
            self.model.zero_grad(set_to_none=True)
            loss = self.model.task_loss(inputs, targets, [0, length], [1.0],
                                        group=None, recompute=recompute)
            loss.backward()

        for _ in range(self.warmup):
            step()
        self._sync()
        times = [seconds_of(step, self.cuda) for _ in range(self.iters)]
        memory = 0
        if self.cuda:
            self.model.zero_grad(set_to_none=True)
            torch.cuda.reset_peak_memory_stats()
            step()
            self._sync()
            memory = torch.cuda.max_memory_allocated()
        return statistics.median(times), memory


def main(argv):
    args = parse_args(argv)
    began = time.monotonic()
    sys.path[:0] = [os.path.join(REPO, "examples"),
                    os.path.join(REPO, "client_lib", "python", "src")]
    try:
        import torch
        from model import Transformer, load_spec
    except ImportError as e:
        print("profile_model: cannot import the model (examples/model.py, "
              "torch): %s" % e, file=sys.stderr)
        return 1

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        print("profile_model: --device=cuda, but torch %s sees no GPU"
              % torch.__version__, file=sys.stderr)
        return 1
    spec_path, dtype_name, lengths_text = DEFAULTS[device]
    spec_path = args.spec or spec_path
    dtype_name = args.dtype or dtype_name
    dtype = getattr(torch, dtype_name)
    try:
        lengths = csv_ints(args.lengths or lengths_text, "--lengths")
        ratios = csv_ratios(args.recompute)
        spec = load_spec(os.path.join(REPO, spec_path))
    except (ValueError, OSError) as e:
        print("profile_model: %s" % e, file=sys.stderr)
        return 1

    model = Transformer(spec, seed=args.seed, dtype=dtype, device=device)
    profiler = Profiler(torch, model, spec["vocab"], device, args.warmup,
                        args.iters, args.seed)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    out = sys.stdout if args.out == "-" else open(args.out, "w")
    log = sys.stderr if out is sys.stdout else sys.stdout
    out.write("# dcp profile table: forward+backward of examples/model.py, "
              "one sequence per task (tools/device/profile_model.py)\n"
              "# spec: %s\n# device: %s; dtype %s; torch %s; median of %d "
              "after %d warm-up\n# memory_bytes: %s\n%s\n"
              % (spec_path, name, dtype_name,
                 torch.__version__, args.iters, args.warmup,
                 "peak torch.cuda.max_memory_allocated" if device == "cuda"
                 else "not measured on the CPU (0)", HEADER))
    out.flush()

    rows = 0
    for ratio in ratios:
        previous = None  # (length, seconds of one pass)
        for length in lengths:
            left = args.seconds - (time.monotonic() - began)
            if left <= 0:
                print("recompute %g: out of time before length %d"
                      % (ratio, length), file=log)
                break
            passes = args.warmup + args.iters + 1
            if previous is not None:
                # Attention grows with length^2: predict from the last point.
                guess = previous[1] * (length / previous[0]) ** 2 * passes
                if guess > left:
                    print("recompute %g: stop before length %d (about %.1f s "
                          "predicted, %.1f s left)" % (ratio, length, guess,
                                                       left), file=log)
                    break
            try:
                seconds, memory = profiler.measure(length, ratio)
            except RuntimeError as e:
                if not is_oom(e):
                    raise
                model.zero_grad(set_to_none=True)
                if device == "cuda":
                    torch.cuda.empty_cache()
                print("recompute %g: length %d runs out of device memory; "
                      "longer lengths skipped" % (ratio, length), file=log)
                break
            previous = (length, seconds)
            out.write("%d,1,%g,1,%.6g,%d\n" % (length, ratio, seconds, memory))
            out.flush()
            rows += 1
            print("length %6d recompute %-4g %10.3f ms %10.1f MiB"
                  % (length, ratio, seconds * 1e3, memory / 2**20), file=log)
    if out is not sys.stdout:
        out.close()
    print("profile_model: %d rows in %.1f s on %s" % (
        rows, time.monotonic() - began, name), file=log)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
