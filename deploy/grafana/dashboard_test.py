"""Checks deploy/grafana/dcp.json and deploy/prometheus/alerts.yml for real.

  - The dashboard's shape: a current schemaVersion, a Prometheus data-source
    variable every panel and target uses, the job/instance variables,
    unique panel ids, panels that do not overlap on the grid.
  - Against a live job (live_job.py: the real dcp-scheduler, two real
    dcp-agent processes and Debian's Prometheus scraping them every second,
    with alerts.yml loaded):
      * every metric family a panel target or an alert rule names is one
        the daemons export on their live /metrics pages (a histogram's
        _bucket/_sum/_count are its family; `up` is Prometheus' own);
      * the variables' queries resolve to the job's scrape jobs and the
        scheduler's instance, as Grafana would run them (the series API);
      * every target, with the variables substituted as Grafana does, runs
        on Prometheus' query_range API without a parse or evaluation error
        and returns data, as every alert rule's expression runs on the query
        API without one;
      * Prometheus evaluated every loaded rule with health "ok".

Run by dashboard_test.sh (bazel test //deploy/grafana:dashboard_test) from
the runfiles, with Debian's python3.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

ROOT = os.getcwd()
sys.path.insert(0, os.path.join(ROOT, "deploy", "grafana"))
import live_job  # noqa: E402

DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "dcp.json")
PROMETHEUS_DIR = os.path.join(ROOT, "deploy", "prometheus")
# Grafana 10.4 to 11 write schemaVersion 39; older ones are migrated on load.
MIN_SCHEMA_VERSION = 39
# Steps completed before the queries run: enough for rates and refits.
STEPS = 12
PROMETHEUS_OWN = {"up"}

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring",
            "group_left", "group_right", "bool", "offset", "inf", "nan",
            "atan2"}


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def load_rules():
    with open(os.path.join(PROMETHEUS_DIR, "alerts.yml")) as f:
        doc = yaml.safe_load(f)
    return [r for g in doc["groups"] for r in g["rules"]]


def panels(dashboard):
    """Every panel, the ones inside collapsed rows included."""
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])


def targets(dashboard):
    """(panel title, target) of every query of every panel."""
    for p in panels(dashboard):
        for t in p.get("targets", []):
            yield p["title"], t


def metric_names(expr):
    """The metric names a PromQL expression selects.

    Strips what cannot be a metric name (string literals, label matchers,
    ranges, grouping label lists), then keeps the identifiers that are not
    functions, aggregations, keywords or numbers.
    """
    e = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
               " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def exported_families(pages):
    """The name of every family (# TYPE line) on the /metrics pages."""
    families = set()
    for text in pages.values():
        for line in text.splitlines():
            m = re.match(r"# TYPE (\S+) (\S+)", line)
            if m:
                families.add(m.group(1))
    return families


def family_of(name, families):
    if name in families:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[:-len(suffix)] in families:
            return name[:-len(suffix)]
    return None


class MetricNamesTest(unittest.TestCase):
    """The extraction the live checks rely on."""

    def test_it_finds_selectors_and_skips_the_rest(self):
        self.assertEqual(
            metric_names('histogram_quantile(0.99, sum by (le, rank) '
                         '(rate(a_bucket{job="x", le!="on"}[$__rate_interval])))'
                         ' / on (job) group_left (version) b + c offset 5m'
                         ' > bool 1e3 and d'),
            {"a_bucket", "b", "c", "d"})
        self.assertEqual(metric_names('count(up) or vector(0)'), {"up"})


class DashboardShapeTest(unittest.TestCase):

    def setUp(self):
        self.dashboard = load_dashboard()

    def test_schema_version_and_variables(self):
        d = self.dashboard
        self.assertGreaterEqual(d["schemaVersion"], MIN_SCHEMA_VERSION)
        variables = {v["name"]: v for v in d["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        for name in ("scheduler_job", "instance", "agent_job"):
            self.assertEqual(variables[name]["type"], "query", name)
            self.assertEqual(variables[name]["datasource"]["uid"],
                             "${datasource}", name)

    def test_every_panel_and_target_uses_the_variable(self):
        for p in panels(self.dashboard):
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"],
                             {"type": "prometheus", "uid": "${datasource}"},
                             p["title"])
            self.assertTrue(p["targets"], p["title"])
            self.assertTrue(p.get("description"), p["title"])
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}")
                self.assertTrue(t["expr"].strip(), p["title"])

    def test_ids_are_unique_and_panels_do_not_overlap(self):
        ids = [p["id"] for p in panels(self.dashboard)]
        self.assertEqual(len(ids), len(set(ids)))
        cells = {}
        for p in panels(self.dashboard):
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells,
                                     f"{p['title']} overlaps {cells.get((x, y))}")
                    cells[(x, y)] = p["title"]

    def test_the_panels_the_operations_guide_describes(self):
        titles = {p["title"] for p in panels(self.dashboard)
                  if p["type"] != "row"}
        with open(os.path.join(ROOT, "docs", "OPERATIONS.md")) as f:
            guide = f.read()
        for title in titles:
            self.assertTrue(f"**{title}**" in guide,
                            f"docs/OPERATIONS.md does not describe panel {title}")
        for rule in load_rules():
            self.assertTrue(f"`{rule['alert']}`" in guide,
                            f"docs/OPERATIONS.md does not describe {rule['alert']}")


def substitute(expr, variables, rate_interval):
    """The expression as Grafana sends it for these variable values."""
    expr = expr.replace("$__rate_interval", rate_interval)
    for name, value in variables.items():
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    return expr


class LiveTest(unittest.TestCase):
    """The expressions against a live job and its Prometheus."""

    @classmethod
    def setUpClass(cls):
        if shutil.which("prometheus") is None:
            raise unittest.SkipTest(
                "prometheus is not on PATH; tools/setup.sh installs it "
                "(Debian package prometheus)")
        cls.job = live_job.LiveJob(ROOT, PROMETHEUS_DIR, world=2,
                                   tmp=os.environ.get("TEST_TMPDIR"))
        try:
            cls.job.start()
            cls.start = time.time()
            cls.job.wait_for_steps(STEPS)
            cls.pages = cls.job.metrics_pages()
        except Exception:
            cls.job.stop()
            print(cls.job.logs(), file=sys.stderr)
            raise
        cls.dashboard = load_dashboard()

    @classmethod
    def tearDownClass(cls):
        cls.job.stop()

    def resolve_variables(self):
        """Runs the query variables' label_values() as Grafana does."""
        values = {}
        for v in self.dashboard["templating"]["list"]:
            if v["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)",
                             v["query"]["query"])
            self.assertIsNotNone(m, v["name"])
            match = substitute(m.group(1), values, "1m")
            status, answer = self.job.api("series", **{"match[]": match})
            self.assertEqual(status, 200, answer)
            found = sorted({s[m.group(2)] for s in answer["data"]
                            if m.group(2) in s})
            self.assertEqual(len(found), 1, f"{v['name']}: {found}")
            values[v["name"]] = found[0]
        return values

    def test_every_name_is_an_exported_family(self):
        families = exported_families(self.pages)
        self.assertIn("dcp_scheduler_steps_completed_total", families)
        exprs = [(f"panel {title}", t["expr"])
                 for title, t in targets(self.dashboard)]
        exprs += [(f"alert {r['alert']}", r["expr"]) for r in load_rules()]
        for v in self.dashboard["templating"]["list"]:
            if v["type"] == "query":
                exprs.append((f"variable {v['name']}", v["query"]["query"]))
        missing = []
        for where, expr in exprs:
            names = metric_names(re.sub(r"^label_values\((.*),\s*\w+\)$",
                                        r"\1", expr))
            self.assertTrue(names, f"{where}: no metric in {expr}")
            for name in names:
                if name not in PROMETHEUS_OWN and not family_of(name, families):
                    missing.append(f"{where}: {name}")
        self.assertEqual(missing, [], "names no daemon exports")

    def test_the_variables_resolve_to_the_job(self):
        values = self.resolve_variables()
        self.assertEqual(values["scheduler_job"], "dcp-scheduler")
        self.assertEqual(values["agent_job"], "dcp-agent")
        self.assertEqual(values["instance"],
                         f"127.0.0.1:{self.job.scheduler_metrics}")

    def test_every_target_runs_and_returns_data(self):
        values = self.resolve_variables()
        # Grafana's $__rate_interval: four scrape intervals at the least.
        rate_interval = "4s"
        end = time.time()
        for title, t in targets(self.dashboard):
            expr = substitute(t["expr"], values, rate_interval)
            with self.subTest(panel=title, expr=expr):
                self.assertNotIn("$", expr)
                status, answer = self.job.api(
                    "query_range", query=expr, start=f"{self.start:.3f}",
                    end=f"{end:.3f}", step="1")
                self.assertEqual(status, 200, answer)
                self.assertEqual(answer["status"], "success", answer)
                self.assertTrue(answer["data"]["result"],
                                "no data over the job's run")

    def test_every_rule_expression_runs(self):
        for rule in load_rules():
            with self.subTest(alert=rule["alert"]):
                status, answer = self.job.api("query", query=rule["expr"])
                self.assertEqual(status, 200, answer)
                self.assertEqual(answer["status"], "success", answer)

    def test_prometheus_evaluates_every_rule(self):
        names = {r["alert"] for r in load_rules()}

        def evaluated():
            status, answer = self.job.api("rules")
            if status != 200:
                return None
            rules = [r for g in answer["data"]["groups"] for r in g["rules"]]
            if {r["name"] for r in rules} != names:
                return None
            if any(r["lastEvaluation"].startswith("0001") for r in rules):
                return None
            return rules

        rules = live_job.wait_until("every rule evaluated", evaluated)
        for r in rules:
            self.assertEqual((r["name"], r["health"], r.get("lastError", "")),
                             (r["name"], "ok", ""))

    def test_the_page_draws_every_panel(self):
        """dashboard.html (tools/dashboard_screenshot.sh's page) in headless
        Chromium over this job: every panel drawn, no query error."""
        chromium = shutil.which("chromium")
        if chromium is None:
            self.skipTest("chromium is not installed (tools/setup.sh "
                          "screenshot); the page is not checked")
        server, url = live_job.serve_page(self.job.prometheus_url)
        profile = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        try:
            dom = subprocess.run(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                 "--virtual-time-budget=30000", "--window-size=1600,1520",
                 "--dump-dom",
                 f"{url}/dashboard.html?from={self.start:.0f}"
                 f"&to={time.time():.0f}&scrape=1"],
                capture_output=True, text=True, timeout=live_job.PATIENCE_S,
                env=dict(os.environ, HOME=profile)).stdout
        finally:
            server.shutdown()
            server.server_close()
        self.assertIn("<title>dcp dashboard (drawn)</title>", dom)
        self.assertNotIn('class="error"', dom)
        drawn = [p for p in panels(self.dashboard) if p["type"] != "row"]
        self.assertEqual(dom.count('class="panel"'), len(drawn))
        # One line per series of every time series panel, one cell per
        # non-empty bucket and interval of the heatmaps.
        self.assertGreater(dom.count("<path"), len(drawn))
        self.assertGreater(dom.count("<rect"), 0)

    def test_no_alert_fires_on_a_healthy_job(self):
        # The job has just started: only `for:`-less alerts could fire yet,
        # and none of their conditions holds for a job that runs.
        status, answer = self.job.api("alerts")
        self.assertEqual(status, 200, answer)
        firing = [a["labels"]["alertname"] for a in answer["data"]["alerts"]
                  if a["state"] == "firing"]
        self.assertEqual(firing, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
