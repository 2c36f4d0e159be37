"""A live dcp job for the dashboard: real daemons, a real Prometheus.

LiveJob starts the real dcp-scheduler and `world` real dcp-agent processes
(execute mode: they run the tiny model's tasks on the CPU and report their
timings) with every server on 127.0.0.1 port 0, then Debian's Prometheus on
deploy/prometheus/prometheus.yml, with the job's targets written beside it
the way the file says, a 1 s scrape interval, and the alert rules of
deploy/prometheus/alerts.yml loaded (evaluated every second).

Used by dashboard_test.py (bazel test //deploy/grafana:dashboard_test) and,
run as a program, by tools/dashboard_screenshot.sh:

  python3 deploy/grafana/live_job.py --bin=BAZEL_BIN --steps=N -- CMD...

starts the job, waits for N completed steps, serves deploy/grafana/ on
127.0.0.1 (a free port) with /api/v1/ passed through to the Prometheus,
runs CMD with $DASHBOARD_URL (dashboard.html over the job's run so far)
and $PROMETHEUS_URL in its environment, then
drains the job and stops everything. It prints what it does on stderr.
"""

import argparse
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

# What a deadline-bound wait may take; only reached on failure.
PATIENCE_S = 60
POLL_S = 0.1
SCRAPE_INTERVAL = "1s"

# The model of tests/job_inputs.cc's TinyModelJson: 8 heads, so every
# group size of a small world divides them.
TINY_MODEL = {"name": "tiny-dashboard", "layers": 1, "hidden": 256,
              "heads": 8, "kv_heads": 8, "ffn": 512, "vocab": 1000,
              "causal": True}


def free_port():
    """A port nothing listens on now (the kernel's pick for port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, predicate, children=()):
    """Polls `predicate` until it holds; fails if a child exits first."""
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        for name, child in children:
            if child.poll() is not None:
                raise RuntimeError(f"{name} exited ({child.returncode}) "
                                   f"while waiting for {what}")
        time.sleep(POLL_S)
    raise TimeoutError(f"no {what} after {PATIENCE_S} s")


def read_port(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        return int(text) if text else 0
    except (FileNotFoundError, ValueError):
        return 0


class LiveJob:
    """A scheduler, its agents and a Prometheus scraping them.

    Not thread-safe; one owner. `stop()` (or the context manager) ends every
    process it started, the job first with a drain.
    """

    def __init__(self, bin_dir, prometheus_dir, world=2, trace=None,
                 window=8192, tokens_per_step=16384, token_scale=64,
                 tmp=None):
        self.bin_dir = bin_dir
        self.prometheus_dir = prometheus_dir
        self.world = world
        self.trace = trace
        self.window = window
        self.tokens_per_step = tokens_per_step
        self.token_scale = token_scale
        self.tmp = tmp or tempfile.mkdtemp(prefix="dcp-dashboard.")
        self.children = []  # (name, Popen, log path)
        self.scheduler_port = 0
        self.scheduler_metrics = 0
        self.agent_metrics = []
        self.prometheus_port = 0

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # ------------------------------------------------------------ start-up

    def _spawn(self, name, argv):
        log = os.path.join(self.tmp, name + ".log")
        with open(log, "wb") as out:
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.children.append((name, child, log))
        return child

    def _live(self):
        return [(n, c) for n, c, _ in self.children]

    def _wait_port(self, path, name):
        return wait_until(f"port file {path} of {name}",
                          lambda: read_port(path), self._live())

    def _inputs(self):
        model = os.path.join(self.tmp, "model.json")
        with open(model, "w") as f:
            json.dump(TINY_MODEL, f)
        trace = self.trace
        if trace is None:
            # tests/job_inputs.cc's LcgTrace: mostly short samples, a few long.
            trace = os.path.join(self.tmp, "trace.txt")
            x, lines = 12345, []
            for _ in range(3000):
                x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
                d = (x >> 33) % 100
                lines.append(str(64 + d * 20 if d < 90 else 4000 + d * 40))
            with open(trace, "w") as f:
                f.write("\n".join(lines) + "\n")
        return model, trace

    def start(self):
        model, trace = self._inputs()
        p = lambda name: os.path.join(self.tmp, name)
        self._spawn("scheduler", [
            os.path.join(self.bin_dir, "scheduler/server/dcp-scheduler"),
            f"--lengths={trace}", f"--model_config={model}",
            f"--world_size={self.world}", "--gpus_per_node=2",
            f"--window={self.window}",
            f"--tokens_per_step={self.tokens_per_step}",
            "--lookahead_steps=2", "--refit_every=8", "--prior_weight=0.0001",
            "--listen=127.0.0.1:0", f"--port_file={p('scheduler.port')}",
            "--metrics_listen=127.0.0.1:0",
            f"--metrics_port_file={p('scheduler.metrics_port')}"])
        self.scheduler_port = self._wait_port(p("scheduler.port"), "scheduler")
        self.scheduler_metrics = self._wait_port(p("scheduler.metrics_port"),
                                                 "scheduler")
        for r in range(self.world):
            self._spawn(f"agent-{r}", [
                os.path.join(self.bin_dir, "worker_agent/dcp-agent"),
                f"--scheduler=127.0.0.1:{self.scheduler_port}", f"--rank={r}",
                f"--world_size={self.world}", "--mode=execute",
                f"--model_config={model}", f"--token_scale={self.token_scale}",
                "--metrics_listen=127.0.0.1:0",
                f"--metrics_port_file={p(f'agent-{r}.port')}"])
        self.agent_metrics = [self._wait_port(p(f"agent-{r}.port"), f"agent-{r}")
                              for r in range(self.world)]
        self._start_prometheus()

    def _start_prometheus(self):
        conf = os.path.join(self.tmp, "prometheus")
        os.makedirs(os.path.join(conf, "targets"))
        with open(os.path.join(self.prometheus_dir, "prometheus.yml")) as f:
            config = f.read()
        if config.count("scrape_interval: 15s") != 1:
            raise ValueError("deploy/prometheus/prometheus.yml no longer sets "
                             "'scrape_interval: 15s' once")
        config = config.replace(
            "scrape_interval: 15s",
            f"scrape_interval: {SCRAPE_INTERVAL}\n"
            f"  evaluation_interval: {SCRAPE_INTERVAL}")
        config += '\nrule_files: ["alerts.yml"]\n'
        with open(os.path.join(conf, "prometheus.yml"), "w") as f:
            f.write(config)
        shutil.copy(os.path.join(self.prometheus_dir, "alerts.yml"), conf)
        with open(os.path.join(conf, "targets", "dcp-scheduler.json"), "w") as f:
            json.dump([{"targets": [f"127.0.0.1:{self.scheduler_metrics}"]}], f)
        with open(os.path.join(conf, "targets", "dcp-agent.json"), "w") as f:
            json.dump([{"targets": [f"127.0.0.1:{port}"],
                        "labels": {"rank": str(r)}}
                       for r, port in enumerate(self.agent_metrics)], f)
        self.prometheus_config = os.path.join(conf, "prometheus.yml")
        self.prometheus_port = free_port()
        self._spawn("prometheus", [
            shutil.which("prometheus"),
            f"--config.file={self.prometheus_config}",
            f"--storage.tsdb.path={os.path.join(self.tmp, 'tsdb')}",
            f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
            "--log.level=warn"])
        wait_until("every target up", self._all_up, self._live())

    def _all_up(self):
        try:
            up = self.query("up")
        except (OSError, ValueError):
            return False
        return (len(up) == self.world + 1 and
                all(s["value"][1] == "1" for s in up))

    # ------------------------------------------------------------- queries

    @property
    def prometheus_url(self):
        return f"http://127.0.0.1:{self.prometheus_port}"

    def api(self, path, **params):
        """GET /api/v1/PATH; (HTTP status, decoded JSON answer)."""
        url = (f"{self.prometheus_url}/api/v1/{path}?" +
               urllib.parse.urlencode(params, doseq=True))
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def query(self, expr):
        """An instant query's result; raises on any error."""
        status, answer = self.api("query", query=expr)
        if status != 200 or answer.get("status") != "success":
            raise ValueError(f"{expr}: HTTP {status}: {answer}")
        return answer["data"]["result"]

    def scalar(self, expr):
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else 0.0

    def metrics_pages(self):
        """{"scheduler": text, "agent-0": text, ...}: the live /metrics pages."""
        ports = [("scheduler", self.scheduler_metrics)] + [
            (f"agent-{r}", p) for r, p in enumerate(self.agent_metrics)]
        out = {}
        for name, port in ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                        timeout=30) as r:
                out[name] = r.read().decode()
        return out

    def wait_for_steps(self, steps, scrapes=10):
        """Until Prometheus has scraped `steps` completed steps, and every
        target at least `scrapes` times (rates need a few samples)."""
        wait_until(f"{steps} completed steps in Prometheus",
                   lambda: self.scalar("dcp_scheduler_steps_completed_total")
                   >= steps, self._live())
        wait_until(f"{scrapes} scrapes of every target",
                   lambda: self.scalar("min(count_over_time(up[10m]))")
                   >= scrapes, self._live())

    # ------------------------------------------------------------ shutdown

    def drain(self):
        """dcp-ctl drain; the agents then exit. Their exit codes."""
        subprocess.run([os.path.join(self.bin_dir, "scheduler/server/dcp-ctl"),
                        f"--scheduler=127.0.0.1:{self.scheduler_port}", "drain"],
                       check=True, capture_output=True, timeout=PATIENCE_S)
        codes = []
        for name, child, _ in self.children:
            if name.startswith("agent-"):
                codes.append(child.wait(timeout=PATIENCE_S))
        return codes

    def stop(self):
        for _, child, _ in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for _, child, _ in self.children:
            try:
                child.wait(timeout=PATIENCE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    def logs(self, tail=2000):
        out = []
        for name, child, log in self.children:
            with open(log, errors="replace") as f:
                text = f.read()
            out.append(f"--- {name} (exit {child.poll()}):\n{text[-tail:]}")
        return "\n".join(out)


class _PageHandler(http.server.SimpleHTTPRequestHandler):
    """deploy/grafana/ as files, /api/v1/... passed to the Prometheus."""

    prometheus_url = ""

    def do_GET(self):
        if not self.path.startswith("/api/v1/"):
            return super().do_GET()
        try:
            with urllib.request.urlopen(self.prometheus_url + self.path,
                                        timeout=30) as r:
                status, body = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve_page(prometheus_url):
    """Serves deploy/grafana/ on a free 127.0.0.1 port; (server, url)."""
    handler = type("Handler", (_PageHandler,),
                   {"prometheus_url": prometheus_url})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0),
        lambda *a, **k: handler(*a, directory=HERE, **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True,
                        help="bazel-bin (dcp-scheduler, dcp-agent, dcp-ctl)")
    parser.add_argument("--prometheus_dir",
                        default=os.path.join(HERE, "..", "prometheus"))
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--trace", default=None)
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--tokens_per_step", type=int, default=16384)
    parser.add_argument("--token_scale", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60,
                        help="completed steps to wait for before CMD")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    job = LiveJob(args.bin, args.prometheus_dir, world=args.world,
                  trace=args.trace, window=args.window,
                  tokens_per_step=args.tokens_per_step,
                  token_scale=args.token_scale)
    global PATIENCE_S
    PATIENCE_S = max(PATIENCE_S, args.steps * 10)
    with job:
        print(f"live_job: {args.world} agents, Prometheus on "
              f"{job.prometheus_url}; logs in {job.tmp}", file=sys.stderr)
        start = time.time()
        job.wait_for_steps(args.steps)
        end = time.time()
        print(f"live_job: {args.steps} steps completed in "
              f"{end - start:.0f} s", file=sys.stderr)
        server, url = serve_page(job.prometheus_url)
        page = (f"{url}/dashboard.html?from={start:.0f}&to={end:.0f}"
                f"&scrape={SCRAPE_INTERVAL.rstrip('s')}")
        env = dict(os.environ, DASHBOARD_URL=page,
                   PROMETHEUS_URL=job.prometheus_url)
        rc = subprocess.run(args.command, env=env).returncode
        server.shutdown()
        server.server_close()
        job.drain()
    if rc == 0:
        shutil.rmtree(job.tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
