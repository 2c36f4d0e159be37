"""Trains the training issue's model (examples/model.py) with PyTorch on the
synthetic corpus, in one of two loops that differ by the lines dcp adds:

  --mode=plain  a plain torch.distributed loop: each rank runs its share of
                a fixed batch, sample by sample, then the gradient
                all-reduce and an AdamW step;
  --mode=dcp    the same loop with dcp: the batches, their packing, each
                task's sequence-parallel group and recompute come from a
                dcp-scheduler, and the loop reports its task times back.

Each rank is a process with torch.distributed's environment (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as torchrun sets it; --local_world=N
starts N such rank processes of this script on this host (Debian's torchrun
1.13 fails under Python 3.11):

  export PYTHONPATH=bazel-bin/client_lib/python  # or: pip install ./client_lib/python
  python3 examples/train.py --mode=plain --local_world=4
  python3 examples/train.py --mode=dcp --local_world=4 --scheduler=HOST:PORT

--save_gradients=DIR writes, after the first step's gradient all-reduce
(before the optimizer step), DIR/rank<R>.json: the rank's parameters and
summed gradients, its tasks, and (dcp mode) the RankStep it ran.
"""

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dcp  # noqa: E402
import dcp.torch  # noqa: E402
from model import Transformer, load_spec  # noqa: E402


def pack(corpus, samples, lengths):
    """The packed task's input and target token ids and its cu_seqlens."""
    inputs, targets, cu_seqlens = [], [], [0]
    for sample, length in zip(samples, lengths):
        x, y = corpus.tokens(sample, length)
        inputs += x
        targets += y
        cu_seqlens.append(cu_seqlens[-1] + length)
    as_ids = lambda ids: torch.tensor(ids, dtype=torch.int64, device=DEVICE)
    return as_ids(inputs), as_ids(targets), cu_seqlens


def sync_gradients(model, loss_sum):
    """Sums the gradients (a rank without tasks adds zeros) and the loss
    over the world; returns the step's loss."""
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
    loss = torch.tensor([loss_sum], dtype=torch.float64, device=DEVICE)
    dist.all_reduce(loss)
    return loss.item()


def fixed_batches(args):
    """The plain loop's batches: a seeded shuffle of the length trace, cut
    into batches of about --tokens_per_step tokens (lengths truncated to the
    window)."""
    with open(args.lengths) as f:
        lengths = [min(int(line), args.window) for line in f if line.strip()]
    order = torch.randperm(len(lengths),
                           generator=torch.Generator().manual_seed(args.seed))
    batch, tokens = [], 0
    for sample in order.tolist():
        batch.append((sample, lengths[sample]))
        tokens += lengths[sample]
        if tokens >= args.tokens_per_step:
            yield batch
            batch, tokens = [], 0


# The two loops. README.md shows their diff; tests/python_client_test.py
# checks it stays within ten added lines.

def train_plain(args, model, optimizer, corpus, on_step):
    rank, world = dist.get_rank(), dist.get_world_size()
    for step, batch in zip(range(args.steps), fixed_batches(args)):
        total = sum(length for _, length in batch)
        loss_sum = 0.0
        for sample, length in batch[rank::world]:
            inputs, targets, cu_seqlens = pack(corpus, [sample], [length])
            loss = model.task_loss(inputs, targets, cu_seqlens, [length / total])
            loss.backward()
            loss_sum += loss.item()
        step_loss = sync_gradients(model, loss_sum)
        on_step(step, step_loss)
        optimizer.step()
        optimizer.zero_grad()


def rehearser(model, corpus):
    """dcp.Client's ``profile``: one forward and backward of a profile
    point's one-task step, as the loop runs a task, its gradients dropped
    (there are none yet: the profile comes before step 0)."""
    def rehearse(step):
        task = step.tasks[0]
        inputs, targets, cu_seqlens = pack(corpus, task.samples, task.lengths)
        model.task_loss(inputs, targets, cu_seqlens, task.loss_weights,
                        dcp.torch.task_groups(task), task.recompute).backward()
        model.zero_grad(set_to_none=True)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
    return rehearse


def train_dcp(args, model, optimizer, corpus, on_step):
    rank, world = dist.get_rank(), dist.get_world_size()
    client = dcp.Client(args.scheduler, rank=rank, world_size=world, profile=args.profile)
    for step in client.steps():
        seconds = []
        loss_sum = 0.0
        for task in step.tasks:
            start = time.perf_counter()
            inputs, targets, cu_seqlens = pack(corpus, task.samples, task.lengths)
            loss = model.task_loss(inputs, targets, cu_seqlens, task.loss_weights,
                                   dcp.torch.task_groups(task), task.recompute)
            loss.backward()
            loss_sum += loss.item()
            seconds.append(time.perf_counter() - start)
        step_loss = sync_gradients(model, loss_sum)
        on_step(step, step_loss)
        optimizer.step()
        optimizer.zero_grad()
        client.report_step(step, seconds)


# ---- Around the loops ------------------------------------------------------

DEVICE = "cpu"


def save_gradients(path, model, step):
    """What --save_gradients writes (see the module docstring)."""
    tolist = lambda t: t.detach().double().cpu().flatten().tolist()
    record = {
        "rank": dist.get_rank(),
        "parameters": {n: tolist(p) for n, p in model.named_parameters()},
        "gradients": {n: tolist(p.grad) for n, p in model.named_parameters()},
    }
    if isinstance(step, dcp.Step):
        record["step"] = step.step
        record["total_tokens"] = step.total_tokens
        record["tasks"] = [{
            "task_index": t.task_index, "samples": list(t.samples),
            "lengths": list(t.lengths), "loss_weights": list(t.loss_weights),
            "group_ranks": list(t.group_ranks), "ulysses": t.ulysses,
            "recompute": t.recompute,
        } for t in step.tasks]
        record["rank_step"] = base64.b64encode(step.plan).decode()
    with open(path, "w") as f:
        json.dump(record, f)


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["plain", "dcp"], default="plain")
    parser.add_argument("--scheduler", default="",
                        help="dcp mode: HOST:PORT of the dcp-scheduler")
    parser.add_argument("--model_config", default=os.path.join(
        here, "..", "data", "models", "cpu-tiny.json"))
    parser.add_argument("--lengths", default=os.path.join(
        here, "..", "data", "lengths", "wikipedia.txt"),
        help="plain mode: the length trace batches are drawn from")
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--tokens_per_step", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20,
                        help="plain mode: steps to train (dcp mode trains "
                             "until the scheduler drains the job)")
    parser.add_argument("--seed", type=int, default=0,
                        help="of the weights, the corpus and the plain "
                             "loop's shuffle")
    parser.add_argument("--dtype", choices=["float32", "float64", "bfloat16"],
                        default="float32",
                        help="of the weights and activations (bfloat16: on a "
                             "GPU, for speed; the optimizer's state too)")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--device", default="cpu",
                        help="cpu, or cuda (rank r on GPU r %% devices; "
                             "initialise torch.distributed with nccl)")
    parser.add_argument("--profile", action="store_true",
                        help="dcp mode: answer the scheduler's start-up "
                             "profile (dcp-scheduler --profile_at_start) "
                             "with this model")
    parser.add_argument("--save_gradients", default="")
    parser.add_argument("--loss_log", default="",
                        help="rank 0 writes one JSON line per step here")
    parser.add_argument("--local_world", type=int, default=0,
                        help="start this many rank processes on this host")
    args = parser.parse_args(argv)
    if args.mode == "dcp" and not args.scheduler:
        parser.error("--mode=dcp needs --scheduler=HOST:PORT")
    return args


def run_local_world(args, argv):
    """--local_world: this script's ranks as child processes; the worst
    exit status."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rest = [a for a in argv if not a.startswith("--local_world")]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE=str(args.local_world))
    ranks = [subprocess.Popen([sys.executable, os.path.abspath(__file__)] +
                              rest, env=dict(env, RANK=str(r)))
             for r in range(args.local_world)]
    codes = [rank.wait() for rank in ranks]
    return max(codes, key=abs)


def main(argv):
    global DEVICE
    args = parse_args(argv)
    if args.local_world > 0:
        return run_local_world(args, argv)
    torch.set_num_threads(1)
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["RANK"]) %
                              torch.cuda.device_count())
        DEVICE = "cuda"
    dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo")
    spec = load_spec(args.model_config)
    dtype = {"float32": torch.float32, "float64": torch.float64,
             "bfloat16": torch.bfloat16}[args.dtype]
    model = Transformer(spec, seed=args.seed, dtype=dtype, device=DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                  weight_decay=0.01)
    corpus = dcp.SyntheticCorpus(vocab=spec["vocab"], seed=args.seed)
    log = open(args.loss_log, "w") if args.loss_log and \
        dist.get_rank() == 0 else None
    steps_done = []

    def on_step(step, loss):
        index = step.step if isinstance(step, dcp.Step) else step
        if args.save_gradients and not steps_done:
            os.makedirs(args.save_gradients, exist_ok=True)
            save_gradients(os.path.join(args.save_gradients, "rank%d.json"
                                        % dist.get_rank()), model, step)
        steps_done.append(index)
        if log:
            log.write(json.dumps({"step": index, "loss": loss}) + "\n")
            log.flush()

    args.profile = rehearser(model, corpus) if args.profile else None
    loop = train_dcp if args.mode == "dcp" else train_plain
    loop(args, model, optimizer, corpus, on_step)
    if dist.get_rank() == 0:
        print("train.py: %s mode, %d ranks trained %d steps"
              % (args.mode, dist.get_world_size(), len(steps_done)),
              file=sys.stderr)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
