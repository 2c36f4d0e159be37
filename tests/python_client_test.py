"""The Python package dcp end to end: a real dcp-scheduler process and four
Python rank processes running examples/train.py --mode=dcp (torch.distributed
over Gloo, each task's group formed by dcp.torch, Ulysses over it).

Checks that after the first step every rank holds the same summed gradients,
equal to (1) one process running the step's tasks whole (float64, 1e-9
relative) and (2) the C++ trainer running the same RankSteps
(tests/plan_gradients); that the plan used sequence-parallel groups; that
examples/train.py's dcp loop adds at most ten lines to the plain one; and
that a dropped scheduler makes next_step raise instead of hanging.

Run by tests/python_client_test.sh under Bazel (paths below are runfiles).
"""

import base64
import difflib
import inspect
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "client_lib", "python"),
                os.path.join(ROOT, "examples")]

import torch  # noqa: E402

import dcp  # noqa: E402
import train  # noqa: E402
from model import Transformer, load_spec  # noqa: E402

SCHEDULER = os.path.join(ROOT, "scheduler", "server", "dcp-scheduler")
AGENT = os.path.join(ROOT, "worker_agent", "dcp-agent")
PLAN_GRADIENTS = os.path.join(ROOT, "tests", "plan_gradients")
MODEL = os.path.join(HERE, "testdata", "tiny_model.json")
# Llama 3 8B's sizes with the test model's head counts: what the scheduler
# plans the job as (a tiny model's own costs keep every sequence on one rank).
PLAN_COSTS = os.path.join(ROOT, "data", "models", "llama3-8b-4-heads.json")
LENGTHS = os.path.join(ROOT, "data", "lengths", "wikipedia.txt")
# A model of two heads, planned as Llama 3 8B's sizes with two heads, on long
# sequences: groups of four ranks are rings of 2-way Ulysses groups.
MODEL_2_HEADS = os.path.join(ROOT, "data", "models", "cpu-tiny-2-heads.json")
PLAN_COSTS_2_HEADS = os.path.join(HERE, "testdata", "llama3-8b-2-heads.json")
LONG_LENGTHS = os.path.join(ROOT, "data", "lengths", "longctx_wlb.txt")
SEED = 3
WORLD = 4
DEADLINE_S = 240


def tmpdir():
    return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))


def read(path):
    """The file's text; empty when it does not exist (yet)."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scheduler:
    """A dcp-scheduler process planning the test job on 127.0.0.1:0."""

    def __init__(self, workdir, world, steps, window=128, tokens=512,
                 lengths=LENGTHS, plan_costs=PLAN_COSTS, extra=()):
        self.log = open(os.path.join(workdir, "scheduler.log"), "w")
        self.process = subprocess.Popen([
            SCHEDULER, "--lengths=" + lengths,
            "--model_config=" + plan_costs,
            "--world_size=%d" % world, "--window=%d" % window,
            "--tokens_per_step=%d" % tokens, "--seed=%d" % SEED,
            "--max_steps=%d" % steps, "--listen=127.0.0.1:0",
            "--metrics_listen=127.0.0.1:0",
        ] + list(extra), stdout=self.log, stderr=subprocess.PIPE, text=True)
        # The scheduler says where it listens once it serves: a thread
        # copies its output to the log and notifies that line (or the
        # output's end, when the scheduler exits first).
        listening = re.compile(r"listening on (\S+)")
        found = {}
        told = threading.Event()

        def copy_output():
            for line in self.process.stderr:
                self.log.write(line)
                self.log.flush()
                match = listening.search(line)
                if match and not told.is_set():
                    found["address"] = match.group(1)
                    told.set()
            told.set()

        self.copier = threading.Thread(target=copy_output, daemon=True)
        self.copier.start()
        if not told.wait(timeout=60):
            raise AssertionError("dcp-scheduler never said where it listens")
        if "address" not in found:
            self.process.wait()
            raise AssertionError("dcp-scheduler exited %d: %s" % (
                self.process.returncode, self.log_text()))
        self.address = found["address"]

    def log_text(self):
        self.log.flush()
        return read(self.log.name)[-4000:]

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.copier.join()
        self.log.close()


def run_ranks(workdir, scheduler, model=MODEL, extra=()):
    """examples/train.py --mode=dcp as WORLD rank processes, each writing
    its first step's gradients to workdir/rank<R>.json."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE=str(WORLD),
               PYTHONPATH=os.pathsep.join(sys.path[:2]))
    ranks = []
    for r in range(WORLD):
        log = open(os.path.join(workdir, "rank%d.log" % r), "w")
        ranks.append((subprocess.Popen([
            sys.executable, os.path.join(ROOT, "examples", "train.py"),
            "--mode=dcp", "--scheduler=" + scheduler.address,
            "--model_config=" + model, "--seed=%d" % SEED,
            "--dtype=float64", "--save_gradients=" + workdir,
        ] + list(extra), env=dict(env, RANK=str(r)), stdout=log,
            stderr=subprocess.STDOUT),
            log))
    deadline = time.monotonic() + DEADLINE_S
    failures = []
    for r, (process, log) in enumerate(ranks):
        try:
            process.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        if process.returncode != 0:
            failures.append("rank %d exited %d:\n%s" % (
                r, process.returncode, read(log.name)[-3000:]))
    if failures:
        raise AssertionError("\n".join(failures) + "\nscheduler:\n" +
                             scheduler.log_text())


def relative(got, want):
    """||got - want|| / ||want|| of two flat lists."""
    diff = math.sqrt(sum((a - b) ** 2 for a, b in zip(got, want)))
    norm = math.sqrt(sum(b * b for b in want))
    return diff / norm if norm > 0 else diff


def single_process_gradients(tasks, model_path=MODEL):
    """The step in one process: every task run whole (a group of one)."""
    spec = load_spec(model_path)
    model = Transformer(spec, seed=SEED, dtype=torch.float64)
    corpus = dcp.SyntheticCorpus(vocab=spec["vocab"], seed=SEED)
    for task in tasks:
        inputs, targets, cu_seqlens = train.pack(corpus, task["samples"],
                                                 task["lengths"])
        model.task_loss(inputs, targets, cu_seqlens,
                        task["loss_weights"]).backward()
    return {n: p.grad.flatten().tolist() for n, p in model.named_parameters()}


def two_rank_task():
    """A pack of three samples, 17 tokens: uneven over two ranks."""
    gen = torch.Generator().manual_seed(SEED)
    inputs = torch.randint(0, 16, (17,), generator=gen)
    targets = torch.randint(0, 16, (17,), generator=gen)
    return inputs, targets, [0, 5, 14, 17], [0.2, 0.5, 0.3]


# Each of two ranks runs its share of two_rank_task() over a dcp.torch group
# with half its layers recomputed; rank 0 writes the summed gradients.
TWO_RANKS = """
import json, os, sys, torch, torch.distributed as dist
import dcp.torch
from model import Transformer, load_spec
from python_client_test import SEED, two_rank_task
dist.init_process_group("gloo")
class Task:
    task_index, group_ranks, rendezvous_prefix = 0, [0, 1], "test/e0/g0-1"
model = Transformer(load_spec(sys.argv[1]), seed=SEED, dtype=torch.float64)
inputs, targets, cu_seqlens, weights = two_rank_task()
model.task_loss(inputs, targets, cu_seqlens, weights,
                group=dcp.torch.group(Task), recompute=0.5).backward()
grads = {}
for name, p in model.named_parameters():
    dist.all_reduce(p.grad)
    grads[name] = p.grad.flatten().tolist()
if dist.get_rank() == 0:
    with open(os.path.join(sys.argv[2], "two_ranks.json"), "w") as f:
        json.dump(grads, f)
dist.destroy_process_group()
"""


class PythonClientTest(unittest.TestCase):

    def run_job(self, scheduler_args, model=MODEL, rank_args=()):
        """Runs the 4-rank job; the ranks' saved first steps and that
        step's tasks (the union of the ranks'), in task order."""
        workdir = tmpdir()
        scheduler = Scheduler(workdir, WORLD, **scheduler_args)
        try:
            run_ranks(workdir, scheduler, model, rank_args)
        finally:
            scheduler.kill()
        self.scheduler_log = read(scheduler.log.name)
        saved = []
        for r in range(WORLD):
            with open(os.path.join(workdir, "rank%d.json" % r)) as f:
                saved.append(json.load(f))
        tasks = {t["task_index"]: t for s in saved for t in s["tasks"]}
        self.assertEqual(sum(sum(t["lengths"]) for t in tasks.values()),
                         saved[0]["total_tokens"])
        ordered = [tasks[i] for i in sorted(tasks)]
        print("step %d: %s" % (saved[0]["step"], ", ".join(
            "task %d: %d samples on %d ranks (u=%d), recompute %g" % (
                t["task_index"], len(t["samples"]), len(t["group_ranks"]),
                t["ulysses"], t["recompute"]) for t in ordered)),
            file=sys.stderr)
        return workdir, saved, ordered

    def expect_one_process_and_cpp_gradients(self, workdir, saved, tasks,
                                             model=MODEL):
        """Every rank's summed gradients equal one process running `tasks`
        whole and the C++ trainer running the same RankSteps (1e-9)."""
        want = single_process_gradients(tasks, model)
        for s in saved:
            self.assertEqual(s["gradients"], saved[0]["gradients"],
                             "rank %d's summed gradients differ from rank "
                             "0's" % s["rank"])
        worst = max(relative(grad, want[name])
                    for name, grad in saved[0]["gradients"].items())
        print("worst relative gradient difference, 4 Python ranks vs one "
              "process: %.3g" % worst, file=sys.stderr)
        for name, grad in saved[0]["gradients"].items():
            self.assertLessEqual(relative(grad, want[name]), 1e-9, name)

        paths = []
        for s in saved:
            paths.append(os.path.join(workdir, "rank%d.pb" % s["rank"]))
            with open(paths[-1], "wb") as f:
                f.write(base64.b64decode(s["rank_step"]))
        cpp_out = os.path.join(workdir, "cpp.json")
        subprocess.run([PLAN_GRADIENTS, "--model_config=" + model,
                        "--seed=%d" % SEED, "--out=" + cpp_out] + paths,
                       check=True, timeout=DEADLINE_S)
        with open(cpp_out) as f:
            cpp = json.load(f)
        self.assertEqual(sorted(cpp["gradients"]),
                         sorted(saved[0]["gradients"]))
        worst = max(relative(grad, cpp["gradients"][name])
                    for name, grad in saved[0]["gradients"].items())
        print("worst relative gradient difference, 4 Python ranks vs 4 C++ "
              "ranks on the same RankSteps: %.3g" % worst, file=sys.stderr)
        for name, grad in saved[0]["gradients"].items():
            # The same initial weights, bit for bit...
            self.assertEqual(cpp["parameters"][name],
                             saved[0]["parameters"][name], name)
            # ...and the same gradients on the same plan.
            self.assertLessEqual(relative(grad, cpp["gradients"][name]),
                                 1e-9, name)

    def test_gradients_equal_one_process_and_the_cpp_trainer(self):
        workdir, saved, tasks = self.run_job({"steps": 2})
        self.assertTrue(any(len(t["group_ranks"]) > 1 for t in tasks),
                        "the plan has no sequence-parallel group: %s" % tasks)
        self.expect_one_process_and_cpp_gradients(workdir, saved, tasks)

    def test_a_ring_of_ulysses_groups_keeps_the_gradients(self):
        """A model of two heads on four ranks: the plan spreads a sequence
        over all four as 2-way Ulysses inside a ring of two."""
        heads = load_spec(MODEL_2_HEADS)["heads"]
        self.assertEqual(load_spec(PLAN_COSTS_2_HEADS)["heads"], heads)
        self.assertLess(heads, WORLD)
        workdir, saved, tasks = self.run_job(
            {"steps": 1, "window": 1024, "tokens": 1024,
             "lengths": LONG_LENGTHS, "plan_costs": PLAN_COSTS_2_HEADS},
            MODEL_2_HEADS)
        shapes = [(len(t["group_ranks"]), t["ulysses"]) for t in tasks]
        self.assertIn((WORLD, heads), shapes,
                      "no task of %d ranks with u = %d: %s" % (
                          WORLD, heads, tasks))
        self.expect_one_process_and_cpp_gradients(workdir, saved, tasks,
                                                  MODEL_2_HEADS)

    def test_the_ranks_answer_the_profile_and_keep_the_gradients(self):
        """The ranks time the scheduler's start-up profile with their own
        model (train.py --profile) on real groups, rings among them, and
        the first step's gradients are still one process's."""
        workdir, saved, tasks = self.run_job(
            {"steps": 1, "window": 1024, "tokens": 1024,
             "lengths": LONG_LENGTHS, "plan_costs": PLAN_COSTS_2_HEADS,
             "extra": ["--profile_at_start",
                       "--profile_timeout=%ds" % DEADLINE_S]},
            MODEL_2_HEADS, rank_args=["--profile"])
        # 2 heads, 4 ranks in a node: shapes (1, 1), (2, 2), (2, 1) and
        # (4, 2); lengths 256 and 1024 (to the window), recompute 0 and 1;
        # a group's first rank reports its points: 4 + 2 + 2 + 1 reporters.
        entries = (4 + 2 + 2 + 1) * 2 * 2
        log = self.scheduler_log
        profiled = log.find("profile done: 4 ranks answered, %d " % entries)
        self.assertNotEqual(profiled, -1, log[-4000:])
        self.assertLess(profiled, log.find(" step 0 ("), log[-4000:])
        self.expect_one_process_and_cpp_gradients(workdir, saved, tasks,
                                                  MODEL_2_HEADS)

    def test_the_dcp_loop_adds_at_most_ten_lines(self):
        plain = inspect.getsource(train.train_plain).splitlines()[1:]
        dcp_loop = inspect.getsource(train.train_dcp).splitlines()[1:]
        added = [line for line in difflib.unified_diff(plain, dcp_loop,
                                                       lineterm="", n=0)
                 if line.startswith("+") and not line.startswith("+++")]
        self.assertLessEqual(len(added), 10, "\n".join(added))
        self.assertGreater(len(added), 0)

    def test_a_dropped_scheduler_raises(self):
        workdir = tmpdir()
        scheduler = Scheduler(workdir, world=1, steps=1000)
        try:
            client = dcp.Client(scheduler.address, rank=0, world_size=1,
                                step_timeout=60)
            first = client.next_step()
            self.assertFalse(first.drained)
            self.assertEqual(first.step, 0)
            client.report_step(first, [1e-3] * len(first.tasks))
            scheduler.process.send_signal(signal.SIGKILL)
            scheduler.process.wait()
            start = time.monotonic()
            with self.assertRaises(dcp.Error) as raised:
                # Steps received before the scheduler died come first.
                for _ in range(100):
                    client.next_step()
            self.assertIn(raised.exception.code,
                          ("UNAVAILABLE", "DEADLINE_EXCEEDED"))
            waited = time.monotonic() - start
            print("next_step raised %s %.1f s after the scheduler was "
                  "killed" % (raised.exception.code, waited), file=sys.stderr)
            self.assertLess(waited, 60 + 30)
            client.close()
        finally:
            scheduler.kill()

    def test_recompute_and_a_group_of_two_keep_the_gradients(self):
        """dcp.torch's Ulysses exchange over a real Gloo group of two and
        its recompute helper: each rank's share summed is one process's."""
        workdir = tmpdir()
        env = dict(os.environ, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()), WORLD_SIZE="2",
                   PYTHONPATH=os.pathsep.join(sys.path[:2] + [HERE]))
        ranks = [subprocess.Popen(
            [sys.executable, "-c", TWO_RANKS, MODEL, workdir],
            env=dict(env, RANK=str(r))) for r in range(2)]
        for process in ranks:
            self.assertEqual(process.wait(timeout=DEADLINE_S), 0)
        with open(os.path.join(workdir, "two_ranks.json")) as f:
            got = json.load(f)
        spec = load_spec(MODEL)
        for recompute in (0.0, 1.0):
            model = Transformer(spec, seed=SEED, dtype=torch.float64)
            inputs, targets, cu_seqlens, weights = two_rank_task()
            model.task_loss(inputs, targets, cu_seqlens, weights,
                            recompute=recompute).backward()
            for name, p in model.named_parameters():
                self.assertLessEqual(
                    relative(got[name], p.grad.flatten().tolist()), 1e-12,
                    "%s (one process with recompute %g)" % (name, recompute))

    def test_the_sidecar_form_runs_the_job_to_its_end(self):
        workdir = tmpdir()
        scheduler = Scheduler(workdir, world=1, steps=3)
        # A Unix socket's path has at most 107 characters: not under the
        # test's deep temporary directory.
        socket_path = os.path.join(tempfile.mkdtemp(prefix="dcp-py-"),
                                   "agent.sock")
        with open(os.path.join(workdir, "agent.log"), "w") as log:
            agent = subprocess.Popen([
                AGENT, "--mode=serve", "--socket=" + socket_path,
                "--scheduler=" + scheduler.address, "--rank=0",
                "--world_size=1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            # Connect waits (rpc_timeout) for the agent's socket to answer.
            client = dcp.Client(agent_socket=socket_path, rank=0,
                                rpc_timeout=60, step_timeout=60)
            seen = []
            for step in client.steps():
                seen.append(step.step)
                self.assertTrue(step.tasks)
                client.report_step(step, [1e-3] * len(step.tasks))
            self.assertEqual(seen, [0, 1, 2])
            client.close()
        finally:
            agent.kill()
            agent.wait()
            scheduler.kill()
            shutil.rmtree(os.path.dirname(socket_path))

    def test_bad_arguments_raise_naming_the_problem(self):
        with self.assertRaisesRegex(dcp.Error, "scheduler="):
            dcp.Client(rank=0)
        with self.assertRaisesRegex(dcp.Error, "step_timeout"):
            dcp.Client("127.0.0.1:1", rank=0, step_timeout=0)
        with self.assertRaisesRegex(dcp.Error, "not both"):
            dcp.Client("127.0.0.1:1", rank=0, agent_socket="/tmp/x.sock")
        corpus = dcp.SyntheticCorpus(vocab=16, seed=SEED)
        with self.assertRaisesRegex(dcp.Error, "sample -1"):
            corpus.tokens(-1, 4)


if __name__ == "__main__":
    unittest.main()
