"""dcp's Python client (dcp.Client) against the real daemons: dcp-scheduler
processes on 127.0.0.1:0 (their port from --port_file) and a dcp-agent
--mode=serve for the sidecar form.

Covers the job run to its drain in process (one rank, and two ranks in
threads), the sidecar form, bad input (options, ranks the scheduler
refuses, reports), the scheduler killed mid-job (the client gives up with a
clear error; one restarted on its --state_dir is followed to the job's end;
one restarted without it is a new session, refused), a shrunk world
(next_epoch), the bearer token and job id, and TLS.

Run by run_python_test.sh under Bazel (paths below are runfiles), with the
interpreter that runs it: Debian's python3 there.
"""

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
ROOT = os.path.dirname(os.path.dirname(HERE))
# The package as //client_lib/python:dcp assembles it.
sys.path.insert(0, HERE)

import dcp  # noqa: E402
from dcp import _messages as pb  # noqa: E402
from dcp import _profile  # noqa: E402
from dcp import _rpc  # noqa: E402

SCHEDULER = os.path.join(ROOT, "scheduler", "server", "dcp-scheduler")
AGENT = os.path.join(ROOT, "worker_agent", "dcp-agent")
LENGTHS = os.path.join(ROOT, "data", "lengths", "wikipedia.txt")
MODEL = os.path.join(ROOT, "data", "models", "llama3-8b-4-heads.json")
# The bound on every wait for a process or a file: generous, never a pace.
PATIENCE_S = 60


def tmpdir():
    return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_until(condition, what, timeout=PATIENCE_S):
    """Polls ``condition`` until it is true; fails naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ds waiting for %s"
                                 % (timeout, what))
        time.sleep(0.02)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scheduler:
    """A dcp-scheduler child planning a small job; ``address`` once it
    serves. ``port=0`` picks a free port (written to its --port_file)."""

    def __init__(self, workdir, world=1, steps=4, port=0, extra=(),
                 name="scheduler"):
        self.workdir = workdir
        self.port_file = os.path.join(workdir, name + ".port")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.log_path = os.path.join(workdir, name + ".log")
        self.args = [
            SCHEDULER, "--lengths=" + LENGTHS, "--model_config=" + MODEL,
            "--world_size=%d" % world, "--window=128",
            "--tokens_per_step=512", "--seed=3", "--max_steps=%d" % steps,
            "--listen=127.0.0.1:%d" % port, "--metrics_listen=",
            "--port_file=" + self.port_file] + list(extra)
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(self.args, stdout=log,
                                            stderr=subprocess.STDOUT)
        wait_until(self._serving, "dcp-scheduler's port file")
        self.port = int(read(self.port_file))
        self.address = "127.0.0.1:%d" % self.port

    def _serving(self):
        if self.process.poll() is not None:
            raise AssertionError("dcp-scheduler exited %d:\n%s"
                                 % (self.process.returncode, self.log()))
        return read(self.port_file).strip().isdigit()

    def log(self):
        return read(self.log_path)[-4000:]

    def status(self):
        channel, metadata = _rpc.scheduler_channel(self.address,
                                                   _rpc.Security())
        with channel:
            return _rpc.SchedulerStub(channel).GetStatus(
                pb.StatusRequest(), timeout=PATIENCE_S, metadata=metadata)

    def kill(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


class Job(unittest.TestCase):
    """Scheduler children, stopped at the end of each test."""

    def setUp(self):
        self.workdir = tmpdir()
        self.children = []

    def tearDown(self):
        for child in self.children:
            child.kill()

    def scheduler(self, **kwargs):
        s = Scheduler(self.workdir, **kwargs)
        self.children.append(s)
        return s

    def two_ranks(self, address, options=lambda r: {}):
        """Ranks 0 and 1 of a 2-rank job in threads, each a dcp.Client
        (with ``options(rank)`` added) that runs the job to its drain,
        reporting every step; the dcp.Steps each got."""
        results, errors = {}, []

        def rank(r):
            try:
                with dcp.Client(address, rank=r, world_size=2,
                                step_timeout=PATIENCE_S,
                                **options(r)) as client:
                    steps = []
                    for step in client.steps():
                        steps.append(step)
                        client.report_step(step, [1e-3] * len(step.tasks))
                    results[r] = steps
            except Exception as e:  # noqa: BLE001 - reported below.
                errors.append((r, e))

        threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(PATIENCE_S * 2)
        self.assertEqual(errors, [])
        return results

    def run_to_drain(self, client, seen):
        for step in client.steps():
            seen.append(step.step)
            client.report_step(step, [1e-3] * len(step.tasks))


class InProcessTest(Job):

    def test_the_job_runs_to_its_drain(self):
        s = self.scheduler(steps=4)
        with dcp.Client(s.address, rank=0, world_size=1,
                        step_timeout=PATIENCE_S) as client:
            self.assertEqual(client.rank, 0)
            self.assertTrue(client.session_id)
            self.assertEqual(client.session_id, s.status().session_id)
            seen = []
            for step in client.steps():
                self.assertIsInstance(step, dcp.Step)
                seen.append(step.step)
                self.assertEqual(step.epoch, 0)
                self.assertTrue(step.tasks)
                self.assertEqual(step.abandoned_from, -1)
                self.assertEqual(
                    sum(sum(t.lengths) for t in step.tasks),
                    step.total_tokens)
                # One rank holds every task: its weights make the mean.
                self.assertAlmostEqual(
                    sum(sum(t.loss_weights) for t in step.tasks), 1.0)
                for m, task in enumerate(step.tasks):
                    self.assertEqual(task.micro_step, m)
                    self.assertEqual(task.group_ranks, [0])
                    self.assertEqual(len(task.samples), len(task.lengths))
                    self.assertEqual(task.rendezvous_prefix, "")
                plan = pb.RankStep.FromString(step.plan)
                self.assertEqual((plan.step, plan.rank), (step.step, 0))
                with self.assertRaises(AttributeError):
                    step.step = 7
                client.report_step(step, [1e-3] * len(step.tasks), 1e-4)
            self.assertEqual(seen, [0, 1, 2, 3])
            # Drained for good, and the scheduler took every report.
            last = client.next_step()
            self.assertTrue(last.drained)
            self.assertEqual(last.step, 3)
            with self.assertRaisesRegex(dcp.Error, "drained step"):
                client.report_step(last, [])
            status = s.status()
            self.assertEqual(status.completed_steps, 4)
            self.assertEqual(status.timing_reports, 4)
        with self.assertRaises(dcp.Error) as closed:
            client.next_step()
        self.assertEqual(closed.exception.code, "FAILED_PRECONDITION")

    def test_two_ranks_share_the_steps(self):
        s = self.scheduler(world=2, steps=3)
        results = self.two_ranks(s.address)
        self.assertEqual([st.step for st in results[0]], [0, 1, 2])
        self.assertEqual([st.step for st in results[1]], [0, 1, 2])
        for mine, theirs in zip(results[0], results[1]):
            tasks = {t.task_index: t for t in mine.tasks + theirs.tasks}
            # The union of the ranks' tasks is the step; a group's task
            # is in both, with its rendezvous prefix.
            self.assertEqual(sum(sum(t.lengths) for t in tasks.values()),
                             mine.total_tokens)
            for t in tasks.values():
                if len(t.group_ranks) > 1:
                    self.assertEqual(t.group_ranks, [0, 1])
                    self.assertTrue(t.rendezvous_prefix.startswith(
                        s.status().session_id + "/"))

    def test_the_loop_answers_the_start_up_profile(self):
        # 4 heads on 2 ranks (one node): shapes (1, 1), (2, 2) and (2, 1),
        # plain Ulysses and a ring of two (ProfiledDegrees); the window
        # 128 makes the grid one length, 256, at recompute 0 and 1, two
        # repetitions each.
        s = self.scheduler(world=2, steps=2,
                           extra=["--profile_at_start",
                                  "--profile_timeout=%ds" % (2 * PATIENCE_S)])
        shapes = [(1, 1), (2, 2), (2, 1)]
        calls = {0: [], 1: []}

        def rehearser(r):
            def rehearse(step):
                self.assertIsInstance(step, dcp.Step)
                self.assertEqual(step.step, -1)
                self.assertEqual(len(step.tasks), 1)
                task = step.tasks[0]
                self.assertEqual(task.lengths, [256])
                self.assertEqual(task.loss_weights, [1.0])
                if len(task.group_ranks) > 1:
                    self.assertTrue(task.rendezvous_prefix.startswith(
                        s.status().session_id + "/e0/profile/"))
                calls[r].append((len(task.group_ranks), task.ulysses,
                                 task.recompute))
            return {"profile": rehearse}

        results = self.two_ranks(s.address, rehearser)
        self.assertEqual({r: [st.step for st in steps]
                          for r, steps in results.items()},
                         {0: [0, 1], 1: [0, 1]})
        # Every rank runs every point, in the request's order, twice.
        expected = [(p, u, r) for p, u in shapes for r in (0.0, 1.0)
                    for _ in range(2)]
        self.assertEqual(calls[0], expected)
        self.assertEqual(calls[1], expected)
        # Each rank reports its points alone; a group's first rank (0)
        # reports the group's: 2 + 2 + 2 x 2 entries, before step 0.
        entries = 2 * 2 + 2 * 2
        log = read(s.log_path)
        profiled = log.find("profile done: 2 ranks answered, %d " % entries)
        self.assertNotEqual(profiled, -1, log)
        self.assertLess(profiled, log.find(" step 0 ("), log)

    def test_the_scheduler_killed_is_a_clear_error(self):
        s = self.scheduler(steps=1000)
        client = dcp.Client(s.address, rank=0, world_size=1,
                            step_timeout=PATIENCE_S, max_outage=1,
                            max_reconnect_attempts=2)
        first = client.next_step()
        client.report_step(first, [1e-3] * len(first.tasks))
        s.kill()
        start = time.monotonic()
        with self.assertRaises(dcp.Error) as raised:
            # Steps received before the scheduler died come first.
            for _ in range(100):
                client.next_step()
        waited = time.monotonic() - start
        self.assertEqual(raised.exception.code, "UNAVAILABLE")
        self.assertRegex(str(raised.exception),
                         r"plan stream of rank 0 is lost .*gave up after "
                         r"\d+ reconnection attempts")
        print("next_step raised %.1f s after the scheduler was killed: %s"
              % (waited, raised.exception), file=sys.stderr)
        self.assertLess(waited, PATIENCE_S)
        # The same answer again, not a hang.
        with self.assertRaises(dcp.Error):
            client.next_step()
        client.close()

    def test_a_scheduler_restarted_on_its_state_is_followed(self):
        state = os.path.join(self.workdir, "state")
        extra = ["--state_dir=" + state]
        s = self.scheduler(steps=8, extra=extra)
        client = dcp.Client(s.address, rank=0, world_size=1,
                            step_timeout=PATIENCE_S)
        session = client.session_id
        seen = []
        for _ in range(3):
            step = client.next_step()
            seen.append(step.step)
            client.report_step(step, [1e-3] * len(step.tasks))
        held = client.next_step()  # Received before the kill, reported after.
        s.kill()
        again = self.scheduler(steps=8, port=s.port, extra=extra,
                               name="restarted")
        client.report_step(held, [1e-3] * len(held.tasks))
        seen.append(held.step)
        self.run_to_drain(client, seen)
        self.assertEqual(seen, list(range(8)))
        self.assertEqual(client.session_id, session)
        status = again.status()
        self.assertEqual(status.session_id, session)
        self.assertEqual(status.completed_steps, 8)
        client.close()

    def test_a_scheduler_restarted_without_its_state_is_refused(self):
        s = self.scheduler(steps=1000)
        client = dcp.Client(s.address, rank=0, world_size=1,
                            step_timeout=PATIENCE_S)
        step = client.next_step()
        client.report_step(step, [1e-3] * len(step.tasks))
        s.kill()
        self.scheduler(steps=1000, port=s.port, name="restarted")
        with self.assertRaises(dcp.Error) as raised:
            for _ in range(100):
                client.next_step()
        self.assertEqual(raised.exception.code, "FAILED_PRECONDITION")
        self.assertIn("the scheduler restarted", str(raised.exception))
        client.close()

    def test_a_shrunk_world_goes_on_at_the_next_epoch(self):
        s = self.scheduler(world=2, steps=8, extra=[
            "--on_rank_failure=shrink", "--rank_timeout=1s"])
        leaver = dcp.Client(s.address, rank=1, world_size=2,
                            step_timeout=PATIENCE_S)
        stayer = dcp.Client(s.address, rank=0, world_size=2,
                            step_timeout=PATIENCE_S)
        for client in (stayer, leaver):
            for expected in (0, 1):
                step = client.next_step()
                self.assertEqual((step.epoch, step.step), (0, expected))
                client.report_step(step, [1e-3] * len(step.tasks))
        # Rank 1 leaves: once the scheduler declares it failed it shrinks
        # the world to rank 0, and rank 0 (whose next collective would
        # fail) goes on at the next epoch.
        leaver.close()
        step = stayer.next_epoch()
        self.assertFalse(step.drained)
        self.assertEqual(step.epoch, 1)
        self.assertEqual(step.world_ranks, [0])
        self.assertGreaterEqual(step.abandoned_from, 2)
        for task in step.tasks:
            self.assertEqual(task.group_ranks, [0])
        epochs = []
        while not step.drained:
            epochs.append(step.epoch)
            stayer.report_step(step, [1e-3] * len(step.tasks))
            step = stayer.next_step()
        self.assertEqual(set(epochs), {1})
        status = s.status()
        self.assertEqual(status.epoch, 1)
        self.assertEqual(status.epoch_world_size, 1)
        stayer.close()


class SecurityTest(Job):

    def test_the_token_and_the_job_id_go_with_every_call(self):
        token = os.path.join(self.workdir, "token")
        with open(token, "w") as f:
            f.write("dcp-test-token-0123456789abcdef\n")
        other = os.path.join(self.workdir, "other.token")
        with open(other, "w") as f:
            f.write("another-token-0123456789abcdef\n")
        s = self.scheduler(steps=2, extra=["--auth_token_file=" + token,
                                           "--job_id=job-a"])
        refusals = [
            (dict(job_id="job-a"), "UNAUTHENTICATED", "no bearer token"),
            (dict(auth_token_file=other, job_id="job-a"), "UNAUTHENTICATED",
             "not this server's"),
            (dict(auth_token_file=token, job_id="job-b"), "PERMISSION_DENIED",
             "job 'job-b'"),
            (dict(auth_token_file=token), "PERMISSION_DENIED",
             "names no job"),
        ]
        for kwargs, code, text in refusals:
            with self.assertRaises(dcp.Error) as raised:
                dcp.Client(s.address, rank=0, connect_timeout=PATIENCE_S,
                           **kwargs)
            self.assertEqual(raised.exception.code, code, kwargs)
            self.assertIn(text, str(raised.exception))
            self.assertIn("registering rank 0 with '%s'" % s.address,
                          str(raised.exception))
        with dcp.Client(s.address, rank=0, auth_token_file=token,
                        job_id="job-a", step_timeout=PATIENCE_S) as client:
            seen = []
            self.run_to_drain(client, seen)
            self.assertEqual(seen, [0, 1])

    def test_tls_and_mutual_tls(self):
        openssl = shutil.which("openssl")
        if openssl is None:
            self.skipTest("no openssl on PATH (tools/setup.sh installs it)")
        pki = make_pki(openssl, self.workdir)
        s = self.scheduler(steps=2, extra=[
            "--tls_cert=" + pki["server.crt"], "--tls_key=" + pki["server.key"],
            "--tls_ca=" + pki["ca.crt"]])
        with dcp.Client(s.address, rank=0, tls_ca=pki["ca.crt"],
                        tls_cert=pki["client.crt"], tls_key=pki["client.key"],
                        step_timeout=PATIENCE_S) as client:
            seen = []
            self.run_to_drain(client, seen)
            self.assertEqual(seen, [0, 1])
        # Without a client certificate, and in plaintext: refused, with the
        # hint at the TLS options.
        for kwargs in (dict(tls_ca=pki["ca.crt"]), {}):
            with self.assertRaises(dcp.Error) as raised:
                dcp.Client(s.address, rank=0, connect_timeout=2, **kwargs)
            self.assertIn(raised.exception.code,
                          ("UNAVAILABLE", "DEADLINE_EXCEEDED"))
            self.assertIn("is the scheduler up?", str(raised.exception))


def make_pki(openssl, workdir):
    """A CA, a server certificate for 127.0.0.1 and a client certificate,
    as tests/test_pki.cc makes them; their paths by name."""
    d = os.path.join(workdir, "pki")
    os.makedirs(d)
    path = lambda name: os.path.join(d, name)  # noqa: E731
    with open(path("openssl.cnf"), "w") as f:
        f.write("[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n"
                "CN = dcp test\n[ca]\nbasicConstraints = critical,CA:TRUE\n"
                "keyUsage = critical,keyCertSign,cRLSign\n"
                "subjectKeyIdentifier = hash\n")
    with open(path("server.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,"
                "digitalSignature\nextendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    with open(path("client.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,"
                "digitalSignature\nextendedKeyUsage=clientAuth\n")

    def run(*args):
        subprocess.run([openssl] + list(args), check=True,
                       capture_output=True, timeout=PATIENCE_S)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes"]
    run("req", "-x509", "-config", path("openssl.cnf"), "-extensions", "ca",
        *ec, "-keyout", path("ca.key"), "-out", path("ca.crt"), "-days", "2",
        "-subj", "/CN=dcp-test-ca")
    for leaf in ("server", "client"):
        run("req", "-config", path("openssl.cnf"), *ec, "-keyout",
            path(leaf + ".key"), "-out", path(leaf + ".csr"), "-subj",
            "/CN=dcp-" + leaf)
        run("x509", "-req", "-in", path(leaf + ".csr"), "-CA", path("ca.crt"),
            "-CAkey", path("ca.key"), "-CAcreateserial", "-days", "2", "-out",
            path(leaf + ".crt"), "-extfile", path(leaf + ".ext"))
    return {name: path(name) for name in os.listdir(d)}


class SidecarTest(Job):

    def test_the_sidecar_form_runs_the_job_to_its_end(self):
        s = self.scheduler(steps=3)
        # A Unix socket's path has at most 107 characters: not under the
        # test's deep temporary directory.
        sockets = tempfile.mkdtemp(prefix="dcp-py-")
        self.addCleanup(shutil.rmtree, sockets)
        socket_path = os.path.join(sockets, "agent.sock")
        log_path = os.path.join(self.workdir, "agent.log")
        with open(log_path, "w") as log:
            agent = subprocess.Popen([
                AGENT, "--mode=serve", "--socket=" + socket_path,
                "--scheduler=" + s.address, "--rank=0", "--world_size=1"],
                stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(agent.wait)
        self.addCleanup(lambda: agent.poll() is None and agent.kill())
        # Connect waits (rpc_timeout) for the agent's socket to answer.
        client = dcp.Client(agent_socket="unix:" + socket_path, rank=0,
                            rpc_timeout=PATIENCE_S, step_timeout=PATIENCE_S)
        self.assertEqual(client.rank, 0)
        self.assertEqual(client.session_id, "")
        seen = []
        first = True
        for step in client.steps():
            seen.append(step.step)
            self.assertTrue(step.tasks)
            self.assertEqual(pb.RankStep.FromString(step.plan).step,
                             step.step)
            if first:
                # The agent serves rank 0: a report of another rank's is
                # refused, and refused again the same way.
                impostor = dcp.Client(agent_socket=socket_path, rank=1,
                                      rpc_timeout=PATIENCE_S)
                with self.assertRaises(dcp.Error) as raised:
                    impostor.report_step(step, [1e-3] * len(step.tasks))
                self.assertEqual(raised.exception.code, "INVALID_ARGUMENT")
                self.assertIn("cannot send a report of rank 1",
                              str(raised.exception))
                impostor.close()
                first = False
            client.report_step(step, [1e-3] * len(step.tasks))
        self.assertEqual(seen, [0, 1, 2])
        # Drained for good (the agent may be gone by now).
        self.assertTrue(client.next_step().drained)
        client.close()
        # The agent exits once its trainer was told of the drain.
        self.assertEqual(agent.wait(timeout=PATIENCE_S), 0, read(log_path))
        self.assertEqual(s.status().completed_steps, 3)

    def test_no_agent_on_the_socket_is_unavailable(self):
        missing = os.path.join(self.workdir, "none.sock")
        start = time.monotonic()
        with self.assertRaises(dcp.Error) as raised:
            dcp.Client(agent_socket=missing, rank=0, rpc_timeout=1)
        self.assertEqual(raised.exception.code, "UNAVAILABLE")
        self.assertIn("no dcp-agent answers on '%s'" % missing,
                      str(raised.exception))
        self.assertIn("dcp-agent --mode=serve", str(raised.exception))
        self.assertLess(time.monotonic() - start, PATIENCE_S)


class BadInputTest(Job):

    def assertRefused(self, code, pattern, *args, **kwargs):
        with self.assertRaises(dcp.Error) as raised:
            dcp.Client(*args, **kwargs)
        self.assertRegex(raised.exception.code, "^(%s)$" % code,
                         str(raised.exception))
        self.assertRegex(str(raised.exception), pattern)
        self.assertIsInstance(raised.exception, RuntimeError)

    def test_malformed_options_name_the_problem(self):
        bad = "INVALID_ARGUMENT"
        local = "127.0.0.1:1"
        self.assertRefused(bad, "scheduler=", rank=0)
        self.assertRefused(bad, "step_timeout must be a positive number of "
                           "seconds, got 0", local, rank=0, step_timeout=0)
        self.assertRefused(bad, "rpc_timeout.*got 'soon'", local, rank=0,
                           rpc_timeout="soon")
        self.assertRefused(bad, "connect_timeout.*got nan", local, rank=0,
                           connect_timeout=float("nan"))
        self.assertRefused(bad, "not both", local, rank=0,
                           agent_socket="/tmp/x.sock")
        self.assertRefused(bad, "rank must be >= 0, not -1", local, rank=-1)
        self.assertRefused(bad, "rank must be an integer, got 0.5", local,
                           rank=0.5)
        self.assertRefused(bad, "rank 2 is outside the world of 2", local,
                           rank=2, world_size=2)
        self.assertRefused(bad, "world_size must be >= 0", local, rank=0,
                           world_size=-3)
        self.assertRefused(bad, "max_outage must be >= 0", local, rank=0,
                           max_outage=-1)
        self.assertRefused(bad, "sidecar mode needs the agent's rank",
                           agent_socket="/tmp/x.sock", rank=-1)
        self.assertRefused(bad, "takes no TLS", agent_socket="/tmp/x.sock",
                           rank=0, job_id="a")
        self.assertRefused(bad, "profile must be a callable", local, rank=0,
                           profile="yes")
        self.assertRefused(bad, "dcp-agent answers the scheduler's profile",
                           agent_socket="/tmp/x.sock", rank=0,
                           profile=lambda step: None)
        # Security options, refused before anything is sent.
        self.assertRefused(bad, "refusing to connect in plaintext to "
                           "'10.1.2.3:50051'.*tls_ca=", "10.1.2.3:50051",
                           rank=0)
        self.assertRefused(bad, "tls_cert and tls_key go together", local,
                           rank=0, tls_ca="/ca", tls_cert="/c")
        self.assertRefused(bad, "contradicts", local, rank=0, tls_ca="/ca",
                           insecure=True)
        self.assertRefused(bad, "tls_server_name needs tls_ca", local,
                           rank=0, tls_server_name="x")
        self.assertRefused(bad, "job_id 'a b': only letters", local, rank=0,
                           job_id="a b")
        self.assertRefused("NOT_FOUND", "auth_token_file: cannot read "
                           "'/nonexistent/token'", local, rank=0,
                           auth_token_file="/nonexistent/token")
        short = os.path.join(self.workdir, "short.token")
        with open(short, "w") as f:
            f.write("abc\n")
        self.assertRefused(bad, "has 3 characters; give at least 16", local,
                           rank=0, auth_token_file=short)
        not_pem = os.path.join(self.workdir, "ca.crt")
        with open(not_pem, "w") as f:
            f.write("not a certificate\n")
        self.assertRefused(bad, "tls_ca: '.*' holds no PEM certificate",
                           local, rank=0, tls_ca=not_pem)

    def test_a_malformed_profile_request_names_the_shape(self):
        request = pb.ProfileRequest(lengths=[256], group_sizes=[1, 2],
                                    ulysses=[1], recompute=[0.0])
        with self.assertRaisesRegex(dcp.Error, "1 Ulysses degrees for 2 "
                                    "group sizes"):
            _profile.run(request, 0, lambda step: None)
        request = pb.ProfileRequest(lengths=[256], group_sizes=[1, 4],
                                    ulysses=[1, 3], recompute=[0.0])
        with self.assertRaisesRegex(dcp.Error, r"shape 1 \(group size 4, "
                                    r"Ulysses degree 3\)"):
            _profile.run(request, 0, lambda step: None)
        # A size with no group holding the rank: refused before any point
        # runs (its peers would wait on it in a collective).
        request = pb.ProfileRequest(lengths=[256], group_sizes=[1, 2],
                                    recompute=[0.0])
        ran = []
        with self.assertRaisesRegex(dcp.Error, "no group of 2 ranks holds "
                                    "rank 0"):
            _profile.run(request, 0, ran.append)
        self.assertEqual(ran, [])

    def test_no_scheduler_is_a_connection_error_with_a_hint(self):
        start = time.monotonic()
        self.assertRefused("DEADLINE_EXCEEDED|UNAVAILABLE",
                           r"registering rank 0 with '127\.0\.0\.1:\d+'.*is "
                           "the scheduler up", "127.0.0.1:%d" % free_port(),
                           rank=0, connect_timeout=1)
        self.assertLess(time.monotonic() - start, PATIENCE_S)

    def test_ranks_the_scheduler_refuses(self):
        s = self.scheduler(world=2, steps=2)
        for kwargs in (dict(rank=5), dict(rank=1, world_size=3)):
            with self.assertRaises(dcp.Error) as raised:
                dcp.Client(s.address, connect_timeout=PATIENCE_S, **kwargs)
            self.assertEqual(raised.exception.code, "INVALID_ARGUMENT",
                             str(raised.exception))
            self.assertIn("registering rank %d with '%s'"
                          % (kwargs["rank"], s.address),
                          str(raised.exception))
        print("refused: %s" % raised.exception, file=sys.stderr)

    def test_bad_reports_are_refused_before_sending(self):
        s = self.scheduler(steps=2)
        with dcp.Client(s.address, rank=0, step_timeout=PATIENCE_S) as client:
            step = client.next_step()
            n = len(step.tasks)
            cases = [
                ([1e-3] * (n + 1), 0.0, "has %d tasks but %d times" % (n,
                                                                      n + 1)),
                ([0.0] * n, 0.0, "time 0.0 is not positive"),
                ([float("nan")] * n, 0.0, "is not positive"),
                (["fast"] * n, 0.0, "must be numbers"),
                ([1e-3] * n, -1.0, "sync time -1.0 is not a non-negative"),
                ([1e-3] * n, float("inf"), "sync time inf"),
            ]
            for seconds, sync, text in cases:
                with self.assertRaises(dcp.Error) as raised:
                    client.report_step(step, seconds, sync)
                self.assertEqual(raised.exception.code, "INVALID_ARGUMENT")
                self.assertIn(text, str(raised.exception))
            with self.assertRaisesRegex(dcp.Error, "takes a dcp.Step"):
                client.report_step(step.step, [1e-3] * n)
            # Nothing reached the scheduler; the good report still does.
            self.assertEqual(s.status().timing_reports, 0)
            client.report_step(step, [1e-3] * n)
            self.assertEqual(s.status().timing_reports, 1)

    def test_the_corpus_refuses_bad_samples(self):
        corpus = dcp.SyntheticCorpus(vocab=16, seed=3)
        with self.assertRaisesRegex(dcp.Error, "sample -1 of length 4"):
            corpus.tokens(-1, 4)
        with self.assertRaisesRegex(dcp.Error, r"lengths in \[1, 1048576\]"):
            corpus.tokens(0, 0)
        with self.assertRaisesRegex(dcp.Error, "vocabulary has only 16"):
            dcp.SyntheticCorpus(vocab=16, text="abc").tokens(0, 4)


if __name__ == "__main__":
    unittest.main(verbosity=2)
