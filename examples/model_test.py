"""examples/model.py under hybrid sequence parallelism: u-way Ulysses inside
c-way ring attention, for (u, c) in (1, 2), (1, 4), (2, 2) and (4, 1).

Four spawned processes (torch.distributed over Gloo) run, per (u, c), two
packed tasks with half the layers recomputed: an uneven pack (several
samples, 31 tokens, divisible by no 2 * c * u) and a short one that leaves
some members nothing but padding; groups of p = u * c < 4 ranks run side
by side. Their summed losses and gradients must equal one process running
the same tasks whole, in float64, to 1e-9 (max abs difference, the loss and
every parameter's gradient). Also: a Ulysses degree that does not divide the
heads is refused naming the numbers.

Run by //client_lib/python:run_python_test.sh under Bazel (paths below are
runfiles), or from a checkout: PYTHONPATH=client_lib/python/src
/usr/bin/python3 examples/model_test.py
"""

import datetime
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "client_lib", "python"), HERE]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing  # noqa: E402

import dcp.torch as dt  # noqa: E402
from model import Transformer, load_spec  # noqa: E402

MODEL = os.path.join(ROOT, "data", "models", "cpu-tiny.json")
SEED = 5
WORLD = 4
TIMEOUT = datetime.timedelta(seconds=120)
SHAPES = [(1, 2), (1, 4), (2, 2), (4, 1)]  # (u, c)
PACKS = [([5, 9, 3, 14], [0.1, 0.3, 0.2, 0.4]), ([3, 2], [0.6, 0.4])]
RECOMPUTE = 0.5


class FakeTask:
    def __init__(self, ranks, ulysses, prefix):
        self.group_ranks, self.ulysses = list(ranks), ulysses
        self.rendezvous_prefix, self.task_index = prefix, 0


def pack(lengths):
    """Seeded input and target ids of a pack, and its cu_seqlens."""
    total = sum(lengths)
    gen = torch.Generator().manual_seed(total)
    vocab = load_spec(MODEL)["vocab"]
    cu_seqlens = [0]
    for n in lengths:
        cu_seqlens.append(cu_seqlens[-1] + n)
    return (torch.randint(0, vocab, (total,), generator=gen),
            torch.randint(0, vocab, (total,), generator=gen), cu_seqlens)


def run_tasks(model, group_of):
    """Both packs' tasks, forward and backward; the summed loss."""
    loss = 0.0
    for lengths, weights in PACKS:
        inputs, targets, cu_seqlens = pack(lengths)
        task_loss = model.task_loss(inputs, targets, cu_seqlens, weights,
                                    group=group_of(lengths),
                                    recompute=RECOMPUTE)
        task_loss.backward()
        loss += task_loss.item()
    return loss


def rank_worker(rank, port, out_dir):
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, None, False, TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=rank,
                            world_size=WORLD, timeout=TIMEOUT)
    results = {}
    for u, c in SHAPES:
        model = Transformer(load_spec(MODEL), seed=SEED, dtype=torch.float64)
        p = u * c
        first = rank // p * p
        # Every pack a task of its own, with a prefix of its own.
        group_of = lambda lengths: dt.task_groups(
            FakeTask(range(first, first + p), u,
                     "test/u%dc%d/%d/%d" % (u, c, len(lengths), first)),
            timeout=TIMEOUT)
        loss = torch.tensor([run_tasks(model, group_of)], dtype=torch.float64)
        dist.all_reduce(loss)
        grads = {}
        for name, param in model.named_parameters():
            dist.all_reduce(param.grad)
            grads[name] = param.grad
        # Groups of p < WORLD ranks each ran the tasks once.
        scale = p / WORLD
        results[(u, c)] = {"loss": loss.item() * scale,
                           "grads": {n: g * scale for n, g in grads.items()}}
    if rank == 0:
        torch.save(results, os.path.join(out_dir, "results.pt"))
    dist.destroy_process_group()


class FakeGroup:
    """A group's size and rank, for checks that happen before any
    collective."""

    def __init__(self, size):
        self._size = size

    def size(self):
        return self._size

    def rank(self):
        return 0


class HybridModelTest(unittest.TestCase):

    def test_hybrid_groups_match_one_process(self):
        out_dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        store = dist.TCPStore("127.0.0.1", 0, None, True, TIMEOUT,
                              wait_for_workers=False)
        torch.multiprocessing.spawn(rank_worker, args=(store.port, out_dir),
                                    nprocs=WORLD, join=True)
        got = torch.load(os.path.join(out_dir, "results.pt"))

        model = Transformer(load_spec(MODEL), seed=SEED, dtype=torch.float64)
        want_loss = run_tasks(model, lambda lengths: None)
        want = {n: p.grad for n, p in model.named_parameters()}
        for u, c in SHAPES:
            mine = got[(u, c)]
            loss_diff = abs(mine["loss"] - want_loss)
            grad_diff = max((mine["grads"][n] - g).abs().max().item()
                            for n, g in want.items())
            print("u=%d c=%d: loss %.12g, max abs difference: loss %.3g, "
                  "gradients %.3g" % (u, c, mine["loss"], loss_diff,
                                      grad_diff), file=sys.stderr)
            self.assertLessEqual(loss_diff, 1e-9, (u, c))
            for name, grad in want.items():
                self.assertLessEqual(
                    (mine["grads"][name] - grad).abs().max().item(), 1e-9,
                    "%s (u=%d, c=%d)" % (name, u, c))
        self.assertGreater(want_loss, 1.0)
        self.assertTrue(all(g.abs().max().item() > 0 for g in want.values()))

    def test_a_ulysses_degree_not_dividing_the_heads_raises(self):
        model = Transformer(load_spec(MODEL), seed=SEED, dtype=torch.float64)
        inputs, targets, cu_seqlens = pack([5, 9, 3, 14])
        for groups in (dt.TaskGroups(FakeGroup(3), None),
                       dt.TaskGroups(FakeGroup(3), FakeGroup(2))):
            with self.assertRaisesRegex(ValueError, "u = 3, heads = 4"):
                model.task_loss(inputs, targets, cu_seqlens,
                                [0.25] * 4, group=groups)


if __name__ == "__main__":
    unittest.main()
