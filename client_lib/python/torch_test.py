"""dcp.torch's pack layouts and ring attention.

The layouts: plain Ulysses (c == 1) as before, the hybrid zig-zag layout of
u-way Ulysses inside a c-way ring, bad Ulysses degrees. Ring attention: each
member of 4 spawned processes (torch.distributed over Gloo, groups formed by
dcp.torch.task_groups) runs its ring shard and heads of one random
attention problem, forward and backward, in float64, under
torch.utils.checkpoint or not; its outputs and q/k/v gradients must match a
dense masked attention over the whole pack in this process.

Run by run_python_test.sh under Bazel (paths below are runfiles), or from a
checkout: PYTHONPATH=client_lib/python/src /usr/bin/python3
client_lib/python/torch_test.py
"""

import datetime
import math
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing  # noqa: E402
import torch.utils.checkpoint  # noqa: E402

import dcp.torch as dt  # noqa: E402

WORLD = 4
TIMEOUT = datetime.timedelta(seconds=120)
# Several samples of different lengths, 31 tokens: divisible by no 2 * c * u;
# and a short pack that leaves some members padding only.
LONG = [5, 9, 3, 14]
SHORT = [3, 2]
HEADS, DIM = 4, 6


class FakeTask:
    def __init__(self, ranks, ulysses=0, prefix="test", task_index=0):
        self.group_ranks, self.ulysses = list(ranks), ulysses
        self.rendezvous_prefix, self.task_index = prefix, task_index


def run_ranks(worker, *args):
    """worker(rank, port, *args) on WORLD spawned processes that meet in a
    TCPStore this process serves on a free port; raises with a failed
    rank's traceback."""
    store = dist.TCPStore("127.0.0.1", 0, None, True, TIMEOUT,
                          wait_for_workers=False)
    torch.multiprocessing.spawn(worker, args=(store.port,) + args,
                                nprocs=WORLD, join=True)


def join_world(rank, port):
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, None, False, TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=rank,
                            world_size=WORLD, timeout=TIMEOUT)


# ---- Ring attention against dense attention --------------------------------

# (name, pack lengths, group size p, Ulysses degree, kv heads, causal,
# under checkpoint). Groups of p < WORLD run side by side, one per p ranks.
CASES = [
    ("ring2", LONG, 2, 1, 2, True, True),
    ("ring4", LONG, 4, 1, 2, True, False),
    ("ring4-recompute", LONG, 4, 1, 2, True, True),
    ("ring4-short", SHORT, 4, 1, 1, True, True),
    ("ulysses2-ring2", LONG, 4, 2, 2, True, True),
    ("ulysses2-ring2-short", SHORT, 4, 2, 2, True, False),
    ("ulysses4", LONG, 4, 4, 4, True, True),
    ("ring4-full", LONG, 4, 1, 2, False, True),
    ("ulysses2-ring2-full", LONG, 4, 2, 2, False, False),
]


def problem(lengths, p, u, kv_heads):
    """The case's layout and its seeded inputs over the whole padded pack:
    q [P, HEADS, DIM], k and v [P, kv_heads, DIM], and the weights w of the
    loss sum(out * w)."""
    layout = dt.PackLayout(lengths, p, u)
    gen = torch.Generator().manual_seed(len(lengths) * 100 + p * 10 + u)
    shape = lambda heads: (layout.padded_tokens, heads, DIM)
    draw = lambda heads: torch.randn(shape(heads), generator=gen,
                                     dtype=torch.float64)
    return layout, draw(HEADS), draw(kv_heads), draw(kv_heads), draw(HEADS)


def ring_worker(rank, port, out_dir):
    join_world(rank, port)
    results = {}
    for name, lengths, p, u, kv_heads, causal, recompute in CASES:
        first = rank // p * p
        task = FakeTask(range(first, first + p), u,
                        "test/%s/%d" % (name, first))
        groups = dt.task_groups(task, timeout=TIMEOUT)
        layout, q, k, v, w = problem(lengths, p, u, kv_heads)
        i, j = groups.rank % u, groups.rank // u
        rows = torch.tensor(layout.ring_shard_positions(j))
        h, e = HEADS // u, kv_heads // u
        mine = lambda x, n: x[rows][:, i * n:(i + 1) * n].clone() \
            .requires_grad_()
        ql, kl, vl = mine(q, h), mine(k, e), mine(v, e)

        def attend(a, b, c):
            return dt.ring_attention(a, b, c, layout, groups.ring, causal)

        out = torch.utils.checkpoint.checkpoint(
            attend, ql, kl, vl, use_reentrant=False) if recompute else \
            attend(ql, kl, vl)
        (out * w[rows][:, i * h:(i + 1) * h]).sum().backward()
        results[name] = {"rows": rows, "i": i, "out": out.detach(),
                         "dq": ql.grad, "dk": kl.grad, "dv": vl.grad}
    torch.save(results, os.path.join(out_dir, "rank%d.pt" % rank))
    dist.destroy_process_group()


def dense_attention(q, k, v, layout, causal):
    """Masked softmax attention over the whole padded pack, by autograd."""
    sample = torch.full((layout.padded_tokens,), -1, dtype=torch.int64)
    for s, (a, b) in enumerate(zip(layout.cu_seqlens, layout.cu_seqlens[1:])):
        sample[a:b] = s
    seen = (sample.unsqueeze(1) == sample.unsqueeze(0)) & \
        (sample >= 0).unsqueeze(1)
    if causal:
        seen &= torch.ones_like(seen).tril()
    repeat = q.shape[1] // k.shape[1]
    kh = k.repeat_interleave(repeat, 1).transpose(0, 1)
    vh = v.repeat_interleave(repeat, 1).transpose(0, 1)
    scores = torch.matmul(q.transpose(0, 1), kh.transpose(1, 2)) / \
        math.sqrt(q.shape[2])
    probs = torch.softmax(scores.masked_fill(~seen, -math.inf), -1)
    probs = probs.masked_fill(~seen, 0.0)  # Rows that see nothing: NaN.
    return torch.matmul(probs, vh).transpose(0, 1)


class RingAttentionTest(unittest.TestCase):

    def test_every_member_matches_dense_attention(self):
        out_dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        run_ranks(ring_worker, out_dir)
        got = [torch.load(os.path.join(out_dir, "rank%d.pt" % r))
               for r in range(WORLD)]
        for name, lengths, p, u, kv_heads, causal, _ in CASES:
            layout, q, k, v, w = problem(lengths, p, u, kv_heads)
            q, k, v = (x.requires_grad_() for x in (q, k, v))
            out = dense_attention(q, k, v, layout, causal)
            (out * w).sum().backward()
            want = {"out": out.detach(), "dq": q.grad, "dk": k.grad,
                    "dv": v.grad}
            worst = 0.0
            covered = {key: torch.zeros_like(x, dtype=torch.bool)
                       for key, x in want.items()}
            for rank in range(WORLD):
                mine = got[rank][name]
                for key in want:
                    n = mine[key].shape[1]
                    heads = slice(mine["i"] * n, (mine["i"] + 1) * n)
                    diff = (mine[key] - want[key][mine["rows"]][:, heads])
                    worst = max(worst, diff.abs().max().item())
                    covered[key][mine["rows"], heads] = True
            print("%s: max abs difference %.3g" % (name, worst),
                  file=sys.stderr)
            self.assertLessEqual(worst, 1e-12, name)
            # Every member of one group together covers every token and head.
            if p == WORLD:
                for key, seen in covered.items():
                    self.assertTrue(bool(seen.all()), "%s %s" % (name, key))
            self.assertGreater(want["out"].abs().max().item(), 0.1)

    def test_bad_shapes_raise_naming_them(self):
        layout = dt.PackLayout(LONG, 1)
        q = torch.zeros(layout.padded_tokens, 4, 6)
        with self.assertRaisesRegex(ValueError, r"\[31 tokens"):
            dt.ring_attention(q[:30], q, q, layout, None)
        with self.assertRaisesRegex(ValueError, "kv heads must divide"):
            dt.ring_attention(q, q[:, :3], q[:, :3], layout, None)
        with self.assertRaisesRegex(ValueError, "a ring of 2, the ring group "
                                                "1"):
            dt.ring_attention(q, q, q, dt.PackLayout(LONG, 2, 1), None)


# ---- Layouts ----------------------------------------------------------------

class PackLayoutTest(unittest.TestCase):

    def test_plain_ulysses_is_contiguous_shards(self):
        for ulysses in (0, 4):
            layout = dt.PackLayout([5, 9, 3], 4, ulysses)
            self.assertEqual((layout.ulysses, layout.ring), (4, 1))
            self.assertEqual((layout.shard_tokens, layout.padded_tokens),
                             (5, 20))
            self.assertEqual([layout.shard_begin(r) for r in range(4)],
                             [0, 5, 10, 15])
            self.assertEqual([layout.real_tokens(r) for r in range(4)],
                             [5, 5, 5, 2])
            self.assertEqual(layout.sample_ids(2), [1, 1, 1, 1, 2])
            self.assertEqual(layout.positions(3), [1, 2, 0, 0, 0])
            whole = torch.arange(17)
            self.assertEqual(layout.shard(whole, 3).tolist(),
                             [15, 16, 0, 0, 0])
            self.assertEqual(layout.ring_shard_positions(0), list(range(20)))

    def test_hybrid_layout_is_zig_zag_chunks(self):
        # u = 2, c = 2: k = 3, chunks of 6 tokens of a pack padded to 24;
        # ring position 0 holds chunks 0 and 3, position 1 chunks 1 and 2.
        layout = dt.PackLayout([5, 9, 3], 4, 2)
        self.assertEqual((layout.ulysses, layout.ring, layout.shard_tokens,
                          layout.padded_tokens, layout.chunk_tokens),
                         (2, 2, 6, 24, 6))
        self.assertEqual(layout.ring_shard_positions(0),
                         list(range(0, 6)) + list(range(18, 24)))
        self.assertEqual(layout.ring_shard_positions(1), list(range(6, 18)))
        self.assertEqual([layout.token_positions(m) for m in range(4)],
                         [list(range(0, 6)), list(range(18, 24)),
                          list(range(6, 12)), list(range(12, 18))])
        self.assertEqual([layout.real_tokens(m) for m in range(4)],
                         [6, 0, 6, 5])
        self.assertEqual(layout.sample_ids(3), [1, 1, 2, 2, 2])
        self.assertEqual(layout.positions(3), [7, 8, 0, 1, 2, 0])
        self.assertEqual(layout.shard(torch.arange(17), 1).tolist(), [0] * 6)
        # u = 3: a member's tokens may straddle its ring shard's two chunks.
        layout = dt.PackLayout([5, 9, 3], 6, 3)
        self.assertEqual(layout.token_positions(1), [4, 5, 18, 19])
        self.assertEqual(layout.real_tokens(1), 2)
        self.assertEqual(layout.shard(torch.arange(17), 1).tolist(),
                         [4, 5, 0, 0])

    def test_hybrid_layouts_partition_the_pack(self):
        for lengths in (LONG, SHORT, [1], [7, 1, 1, 30]):
            for p, u in ((2, 1), (4, 1), (4, 2), (6, 3), (6, 2), (8, 2)):
                layout = dt.PackLayout(lengths, p, u)
                c, total = p // u, layout.total_tokens
                where = [t for m in range(p)
                         for t in layout.token_positions(m)]
                self.assertEqual(sorted(where),
                                 list(range(layout.padded_tokens)))
                self.assertGreaterEqual(layout.padded_tokens, total)
                self.assertLess(layout.padded_tokens - total, 2 * p)
                whole = torch.arange(total) + 1
                for m in range(p):
                    positions = layout.token_positions(m)
                    real = layout.real_tokens(m)
                    self.assertEqual(len(positions), layout.shard_tokens)
                    # Real tokens first; the shard's rows are theirs.
                    self.assertTrue(all(t < total for t in positions[:real]))
                    self.assertTrue(all(t >= total for t in positions[real:]))
                    self.assertEqual(
                        layout.shard(whole, m).tolist(),
                        [t + 1 for t in positions[:real]] +
                        [0] * (layout.shard_tokens - real))
                for j in range(c):
                    members = [t for m in range(j * u, (j + 1) * u)
                               for t in layout.token_positions(m)]
                    self.assertEqual(members,
                                     layout.ring_shard_positions(j))

    def test_bad_ulysses_degrees_raise_naming_the_numbers(self):
        with self.assertRaisesRegex(ValueError,
                                    "u = 3 does not divide the group size "
                                    "p = 4"):
            dt.PackLayout(LONG, 4, 3)
        with self.assertRaisesRegex(ValueError, "u = 8 does not divide"):
            dt.PackLayout(LONG, 4, 8)
        with self.assertRaisesRegex(ValueError, "must be >= 0.*-1"):
            dt.PackLayout(LONG, 4, -1)
        # Refused before any group is formed (no torch.distributed here).
        with self.assertRaisesRegex(ValueError, "u = 3 does not divide the "
                                                "group size p = 4"):
            dt.task_groups(FakeTask(range(4), ulysses=3))

    def test_task_groups_of_one_rank(self):
        groups = dt.task_groups(FakeTask([0]))
        self.assertEqual((groups.ulysses, groups.ring, groups.size,
                          groups.rank), (None, None, 1, 0))
        self.assertEqual(groups.layout(LONG).shard_tokens, 31)


if __name__ == "__main__":
    unittest.main()
