"""Checks the Kubernetes manifests of deploy/kubernetes/ for real, offline.

  - Schemas: every object of every *.yaml here against the Kubernetes
    OpenAPI schemas of the oldest and the newest Kubernetes it is meant for
    (schemas/kubernetes-1.29.json, schemas/kubernetes-1.36.json) and the
    ServiceMonitor against the Prometheus Operator's CRD schema
    (schemas/prometheus-operator-*-servicemonitor.json), with Debian's
    python3-jsonschema. schemas/README.md says where each came from. The
    check is strict, as `kubectl apply` with server-side field validation
    is: a field the schema does not name is an error.
  - The binaries: every flag a manifest passes to dcp-scheduler or dcp-agent
    (its args and the ConfigMap's flag file) is one `--helpfull` lists; then
    the scheduler, an agent and a sidecar-mode trainer run from the
    manifests' own args, env and ConfigMap files (volumes as temporary
    folders, the listen addresses moved to 127.0.0.1 port 0): the
    scheduler answers the probes' health checks SERVING, registers the
    agent, the trainer gets its steps over the sidecar socket, and after
    `dcp-ctl drain` the readiness name turns NOT_SERVING while the liveness
    name stays SERVING; the drain reaches the trainer and both daemons exit
    0.
  - Wiring: labels and selectors, ports and probes, paths against volumes
    and ConfigMap keys, $(VAR)s against env, the world size everywhere,
    non-root security contexts.
  - prometheus-scrape.yml: `promtool check config` (Debian's promtool,
    which is built without Kubernetes service discovery, so the
    kubernetes_sd_configs blocks are checked here against the fields and
    meta labels Prometheus documents for them).

Run by deploy/kubernetes/manifests_test.sh (bazel test
//deploy/kubernetes:manifests_test) from the runfiles.
"""

import copy
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.request

import grpc
import jsonschema
import yaml

ROOT = os.getcwd()
HERE = os.path.join(ROOT, "deploy", "kubernetes")
SCHEMAS = os.path.join(HERE, "schemas")
SCHEDULER = os.path.join(ROOT, "scheduler", "server", "dcp-scheduler")
CTL = os.path.join(ROOT, "scheduler", "server", "dcp-ctl")
AGENT = os.path.join(ROOT, "worker_agent", "dcp-agent")
sys.path.insert(0, os.path.join(ROOT, "client_lib", "python"))

# Kubernetes versions the manifests must be valid for: native sidecar
# containers (an init container with restartPolicy Always) are on by
# default from 1.29.
K8S_VERSIONS = ["1.29", "1.36"]
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}]}

# What a deadline-bound wait in this test may take.
TIMEOUT_S = 60


# ------------------------------------------------------------------ loading

def load_manifests():
    """{file name: [object, ...]} of every *.yaml here."""
    out = {}
    for path in sorted(glob.glob(os.path.join(HERE, "*.yaml"))):
        with open(path) as f:
            out[os.path.basename(path)] = [
                d for d in yaml.safe_load_all(f) if d is not None]
    return out


MANIFESTS = load_manifests()
OBJECTS = [(name, obj) for name, objs in MANIFESTS.items() for obj in objs]


def objects(kind):
    return [obj for _, obj in OBJECTS if obj["kind"] == kind]


def one(kind, name):
    found = [o for o in objects(kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_specs():
    """(workload, pod template) of every object that makes pods."""
    for kind in ("Deployment", "StatefulSet", "Job"):
        for obj in objects(kind):
            yield obj, obj["spec"]["template"]


def containers(pod_spec):
    return pod_spec.get("initContainers", []) + pod_spec["containers"]


def daemon_containers():
    """(pod spec, container, binary) of every container running dcp's."""
    for _, template in pod_specs():
        for c in containers(template["spec"]):
            command = c.get("command", [])
            binary = os.path.basename(command[0]) if command else ""
            if binary in ("dcp-scheduler", "dcp-agent"):
                yield template["spec"], c, binary


def split_flag(arg):
    """"--name=value" -> (name, value); "--name" -> (name, None)."""
    m = re.fullmatch(r"--([A-Za-z0-9_]+)(?:=(.*))?", arg, re.S)
    assert m, f"not a --flag: {arg!r}"
    return m.group(1), m.group(2)


def configmap_files(name):
    cm = one("ConfigMap", name)
    return dict(cm.get("data", {}))


def volume_of_path(pod_spec, container, path):
    """(volume, path relative to its mount) holding `path`, or None."""
    best = None
    for mount in container.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/")
        if path == root or path.startswith(root + "/"):
            if best is None or len(root) > len(best[1]):
                best = (mount["name"], root)
    if best is None:
        return None
    volume = next(v for v in pod_spec["volumes"] if v["name"] == best[0])
    return volume, path[len(best[1]):].lstrip("/")


def flagfile_args(pod_spec, container):
    """The flags of every --flagfile the container's args name."""
    out = []
    for arg in container.get("args", []):
        name, value = split_flag(arg)
        if name != "flagfile":
            continue
        found = volume_of_path(pod_spec, container, value)
        assert found and "configMap" in found[0], (
            f"{container['name']}: --flagfile={value} is on no ConfigMap")
        volume, rel = found
        files = configmap_files(volume["configMap"]["name"])
        assert rel in files, f"--flagfile={value}: no key {rel!r}"
        text = files[rel]
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def all_flags(pod_spec, container):
    """{flag: value} of args and flag files; later ones win, as in Abseil."""
    flags = {}
    for arg in flagfile_args(pod_spec, container) + container.get("args", []):
        name, value = split_flag(arg)
        if name != "flagfile":
            flags[name] = value
    return flags


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def scheduler_container():
    found = [(p, c) for p, c, b in daemon_containers() if b == "dcp-scheduler"]
    assert len(found) == 1, found
    return found[0]


def agent_container():
    found = [(p, c) for p, c, b in daemon_containers() if b == "dcp-agent"]
    assert len(found) == 1, found
    return found[0]


# ------------------------------------------------------------------ schemas

def strict(schema):
    """`schema` as the API server applies it: unknown fields are errors,
    and int-or-string fields take either. Walks only schema positions, so
    a property that happens to be called "properties" is left alone."""
    if not isinstance(schema, dict):
        return schema
    if (schema.get("format") == "int-or-string" or
            schema.get("x-kubernetes-int-or-string")):
        return copy.deepcopy(INT_OR_STRING)
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {k: strict(v) for k, v in out["properties"].items()}
        if ("additionalProperties" not in out and
                not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = strict(out[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in out:
            out[key] = [strict(s) for s in out[key]]
    return out


def load_json(path):
    with open(path) as f:
        return json.load(f)


class Validators:
    """A Draft 4 validator per (Kubernetes version, apiVersion/kind)."""

    def __init__(self):
        self.sources = {}
        self.by_version = {}
        crds = [load_json(p) for p in sorted(glob.glob(
            os.path.join(SCHEMAS, "prometheus-operator-*.json")))]
        for version in K8S_VERSIONS:
            vendored = load_json(os.path.join(SCHEMAS,
                                              f"kubernetes-{version}.json"))
            self.sources[version] = vendored["source"]
            definitions = {k: strict(v)
                           for k, v in vendored["definitions"].items()}
            # A quantity is a JSON string or number ("500m", 2, 0.5).
            definitions[QUANTITY] = {
                "anyOf": [{"type": "string"}, {"type": "number"}]}
            kinds = {}
            for kind, name in vendored["kinds"].items():
                kinds[kind] = {"definitions": definitions,
                               "allOf": [{"$ref": "#/definitions/" + name}]}
            for crd in crds:
                for kind, schema in crd["kinds"].items():
                    schema = strict(schema)
                    # A CRD's metadata is the API server's ObjectMeta.
                    schema["properties"]["metadata"] = {
                        "$ref": "#/definitions/" + OBJECT_META}
                    kinds[kind] = {"definitions": definitions,
                                   "allOf": [schema]}
                    self.sources[kind] = crd["source"]
            self.by_version[version] = {
                k: jsonschema.Draft4Validator(s) for k, s in kinds.items()}

    def errors(self, version, obj):
        kind = f"{obj.get('apiVersion')}/{obj.get('kind')}"
        validator = self.by_version[version].get(kind)
        if validator is None:
            return [f"{kind} has no vendored schema (add it to KINDS in "
                    "schemas/vendor_schemas.py and rerun it, README.md)"]
        return ["/".join(str(p) for p in e.absolute_path) + ": " + e.message
                for e in validator.iter_errors(obj)]


VALIDATORS = Validators()


class SchemaTest(unittest.TestCase):

    def test_every_manifest_is_valid_on_every_version(self):
        self.assertEqual(
            sorted(MANIFESTS),
            ["scheduler-config.yaml", "scheduler.yaml", "servicemonitor.yaml",
             "training-job.yaml"])
        for version in K8S_VERSIONS:
            for name, obj in OBJECTS:
                with self.subTest(version=version, file=name,
                                  object=obj["kind"] + "/" +
                                  obj["metadata"]["name"]):
                    self.assertEqual(VALIDATORS.errors(version, obj), [])
        print("validated against:", json.dumps(VALIDATORS.sources, indent=1))

    def test_the_validator_rejects_what_the_api_server_would(self):
        deployment = one("Deployment", "dcp-scheduler")

        def mutated(edit, obj=deployment):
            obj = copy.deepcopy(obj)
            edit(obj)
            return obj

        def container(obj):
            return obj["spec"]["template"]["spec"]["containers"][0]

        bad = {
            "a misspelt field": mutated(lambda o: container(o).update(
                readinesProbe=container(o).pop("readinessProbe"))),
            "a string port": mutated(lambda o: container(o)["ports"][0].update(
                containerPort="fifty")),
            "a container without a name": mutated(
                lambda o: container(o).pop("name")),
            "a probe without a port": mutated(
                lambda o: container(o)["livenessProbe"]["grpc"].pop("port")),
            "a misspelt ServiceMonitor field": mutated(
                lambda o: o["spec"].update(endpoint=o["spec"].pop("endpoints")),
                one("ServiceMonitor", "dcp-scheduler")),
            "a ServiceMonitor interval that is no duration": mutated(
                lambda o: o["spec"]["endpoints"][0].update(interval="soon"),
                one("ServiceMonitor", "dcp-scheduler")),
        }
        for version in K8S_VERSIONS:
            for what, obj in bad.items():
                with self.subTest(version=version, what=what):
                    self.assertNotEqual(VALIDATORS.errors(version, obj), [])
        # And what the API server takes in either form does pass.
        for version in K8S_VERSIONS:
            ok = mutated(lambda o: container(o)["resources"]["requests"]
                         .update(cpu=2, memory="1.5Gi"))
            ok = mutated(lambda o: container(o)["ports"][0].update(
                containerPort=50051), ok)
            self.assertEqual(VALIDATORS.errors(version, ok), [])


# ------------------------------------------------------------------- wiring

def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


class WiringTest(unittest.TestCase):

    def test_the_deployment_runs_one_scheduler_at_a_time(self):
        d = one("Deployment", "dcp-scheduler")
        self.assertEqual(d["spec"]["replicas"], 1)
        self.assertEqual(d["spec"]["strategy"]["type"], "Recreate")

    def test_selectors_select_their_pods(self):
        for workload, template in pod_specs():
            selector = workload["spec"].get("selector", {}).get("matchLabels")
            if selector is not None:
                self.assertTrue(matches(selector,
                                        template["metadata"]["labels"]))
        for service in objects("Service"):
            with self.subTest(service=service["metadata"]["name"]):
                pods = [t for _, t in pod_specs()
                        if matches(service["spec"]["selector"],
                                   t["metadata"]["labels"])]
                self.assertEqual(len(pods), 1)
                ports = {p["name"]: p["containerPort"]
                         for c in containers(pods[0]["spec"])
                         for p in c.get("ports", [])}
                for port in service["spec"]["ports"]:
                    target = port.get("targetPort", port["port"])
                    if isinstance(target, str):
                        self.assertIn(target, ports)
                        target = ports[target]
                    self.assertIn(target, ports.values())
                    self.assertEqual(port["port"], target)

    def test_listen_flags_serve_the_declared_ports_and_probes(self):
        listen_flags = {"dcp-scheduler": ["listen", "metrics_listen"],
                        "dcp-agent": ["metrics_listen"]}
        for pod_spec, c, binary in daemon_containers():
            with self.subTest(container=c["name"]):
                flags = all_flags(pod_spec, c)
                served = {port_of(flags[f]) for f in listen_flags[binary]
                          if flags.get(f)}
                declared = {p["containerPort"] for p in c.get("ports", [])}
                self.assertEqual(served, declared)
                named = {p["name"]: p["containerPort"]
                         for p in c.get("ports", [])}
                if binary == "dcp-scheduler":
                    self.assertEqual(port_of(flags["listen"]), named["grpc"])
                    self.assertEqual(port_of(flags["metrics_listen"]),
                                     named["metrics"])
                for probe in ("startupProbe", "readinessProbe",
                              "livenessProbe"):
                    if probe in c:
                        self.assertEqual(c[probe]["grpc"]["port"],
                                         named["grpc"])

    def test_readiness_and_liveness_ask_for_different_names(self):
        # Readiness: the server as a whole, NOT_SERVING once drained;
        # liveness (and start-up): the name that stays SERVING through a
        # drain. What each answers, the live run below checks.
        _, c = scheduler_container()
        self.assertEqual(c["readinessProbe"]["grpc"].get("service", ""), "")
        liveness = c["livenessProbe"]["grpc"]["service"]
        self.assertNotEqual(liveness, "")
        self.assertEqual(c["startupProbe"]["grpc"]["service"], liveness)

    def test_paths_lie_on_volumes_and_configmap_keys(self):
        for pod_spec, c, _ in daemon_containers():
            for name, value in all_flags(pod_spec, c).items():
                if not value or not value.startswith("/"):
                    continue
                with self.subTest(container=c["name"], flag=name):
                    found = volume_of_path(pod_spec, c, value)
                    self.assertIsNotNone(found, f"{value} is on no volume")
                    volume, rel = found
                    if "configMap" in volume:
                        self.assertIn(
                            rel, configmap_files(volume["configMap"]["name"]))
        for pod_spec, c, _ in daemon_containers():
            for arg in c.get("args", []):
                if arg.startswith("--flagfile="):
                    self.assertIsNotNone(
                        volume_of_path(pod_spec, c, split_flag(arg)[1]))

    def test_the_trainer_shares_the_agents_socket(self):
        pod_spec, agent = agent_container()
        socket = all_flags(pod_spec, agent)["socket"]
        agent_volume, rel = volume_of_path(pod_spec, agent, socket)
        self.assertIn("emptyDir", agent_volume)
        trainer = next(c for c in pod_spec["containers"]
                       if c["name"] == "trainer")
        env = {e["name"]: e.get("value") for e in trainer["env"]}
        trainer_volume, trainer_rel = volume_of_path(
            pod_spec, trainer, env["DCP_AGENT_SOCKET"])
        self.assertEqual(trainer_volume["name"], agent_volume["name"])
        self.assertEqual(trainer_rel, rel)
        # A native sidecar: started first, stopped after the trainer.
        self.assertIn(agent, pod_spec.get("initContainers", []))
        self.assertEqual(agent["restartPolicy"], "Always")

    def test_env_references_are_declared(self):
        for _, template in pod_specs():
            for c in containers(template["spec"]):
                declared = {e["name"] for e in c.get("env", [])}
                for arg in c.get("args", []) + c.get("command", []):
                    for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                          arg):
                        self.assertIn(var, declared, f"{c['name']}: {arg}")

    def test_ranks_come_from_the_completion_index(self):
        index = ("metadata.annotations"
                 "['batch.kubernetes.io/job-completion-index']")
        job = one("Job", "dcp-train")
        self.assertEqual(job["spec"]["completionMode"], "Indexed")
        pod_spec, agent = agent_container()
        self.assertEqual(all_flags(pod_spec, agent)["rank"],
                         "$(JOB_COMPLETION_INDEX)")
        agent_env = {e["name"]: e for e in agent["env"]}
        self.assertEqual(agent_env["JOB_COMPLETION_INDEX"]["valueFrom"]
                         ["fieldRef"]["fieldPath"], index)
        trainer = next(c for c in pod_spec["containers"]
                       if c["name"] == "trainer")
        trainer_env = {e["name"]: e for e in trainer["env"]}
        self.assertEqual(trainer_env["RANK"]["valueFrom"]["fieldRef"]
                         ["fieldPath"], index)

    def test_the_world_size_agrees_everywhere(self):
        sched_spec, sched = scheduler_container()
        world = int(all_flags(sched_spec, sched)["world_size"])
        job = one("Job", "dcp-train")
        self.assertEqual(job["spec"]["completions"], world)
        self.assertEqual(job["spec"]["parallelism"], world)
        pod_spec, agent = agent_container()
        self.assertEqual(int(all_flags(pod_spec, agent)["world_size"]), world)
        trainer = next(c for c in pod_spec["containers"]
                       if c["name"] == "trainer")
        env = {e["name"]: e.get("value") for e in trainer["env"]}
        self.assertEqual(int(env["WORLD_SIZE"]), world)

    def test_agents_and_trainers_reach_services_that_exist(self):
        pod_spec, agent = agent_container()
        host, port = all_flags(pod_spec, agent)["scheduler"].rsplit(":", 1)
        service = one("Service", host.split(".")[0])
        grpc_port = next(p for p in service["spec"]["ports"]
                         if p["name"] == "grpc")
        self.assertEqual(int(port), grpc_port["port"])
        self.assertTrue(service["spec"].get("publishNotReadyAddresses"))
        # MASTER_ADDR: pod 0 by its hostname in the Job's subdomain.
        job = one("Job", "dcp-train")
        subdomain = job["spec"]["template"]["spec"]["subdomain"]
        headless = one("Service", subdomain)
        self.assertEqual(headless["spec"]["clusterIP"], "None")
        trainer = next(c for c in pod_spec["containers"]
                       if c["name"] == "trainer")
        env = {e["name"]: e.get("value") for e in trainer["env"]}
        self.assertEqual(env["MASTER_ADDR"],
                         f"{job['metadata']['name']}-0.{subdomain}")

    def test_servicemonitors_select_services_and_their_ports(self):
        for monitor in objects("ServiceMonitor"):
            with self.subTest(monitor=monitor["metadata"]["name"]):
                selector = monitor["spec"]["selector"]["matchLabels"]
                services = [s for s in objects("Service")
                            if matches(selector, s["metadata"]["labels"])]
                self.assertEqual(len(services), 1)
                names = {p["name"] for p in services[0]["spec"]["ports"]}
                for endpoint in monitor["spec"]["endpoints"]:
                    self.assertIn(endpoint["port"], names)
                    self.assertEqual(endpoint["path"], "/metrics")

    def test_the_configmap_holds_the_bundled_trace_and_model(self):
        files = configmap_files("dcp-scheduler-config")
        with open(os.path.join(ROOT, "data", "lengths", "code.txt")) as f:
            self.assertEqual(files["lengths.txt"], f.read())
        models = [load_json(p) for p in glob.glob(
            os.path.join(ROOT, "data", "models", "*.json"))]
        self.assertIn(json.loads(files["model.json"]), models)

    def test_pods_run_as_non_root(self):
        for workload, template in pod_specs():
            spec = template["spec"]
            with self.subTest(workload=workload["metadata"]["name"]):
                self.assertIs(spec["securityContext"]["runAsNonRoot"], True)
                self.assertGreater(spec["securityContext"]["runAsUser"], 0)
                self.assertIs(spec.get("automountServiceAccountToken"), False)
                for c in containers(spec):
                    sc = c["securityContext"]
                    self.assertIs(sc["allowPrivilegeEscalation"], False)
                    self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        for _, c, _ in daemon_containers():
            self.assertIn("requests", c["resources"])
            self.assertIs(c["securityContext"]["readOnlyRootFilesystem"],
                          True)


# ----------------------------------------------------------------- promtool

# The kubernetes_sd_config fields and the role=pod meta labels, from
# Prometheus' configuration reference (docs/configuration/configuration.md,
# <kubernetes_sd_config>), for Debian's Prometheus 2.42.
KUBERNETES_SD_FIELDS = {
    "api_server", "role", "kubeconfig_file", "namespaces", "selectors",
    "attach_metadata", "basic_auth", "authorization", "oauth2", "proxy_url",
    "no_proxy", "proxy_from_environment", "proxy_connect_header",
    "follow_redirects", "enable_http2", "tls_config",
}
KUBERNETES_SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice",
                       "ingress"}
POD_META = re.compile(
    r"__meta_kubernetes_(namespace|pod_(name|ip|ready|phase|node_name|"
    r"host_ip|uid|controller_kind|controller_name|container_init|"
    r"container_name|container_id|container_image|container_port_name|"
    r"container_port_number|container_port_protocol|"
    r"(label|labelpresent|annotation|annotationpresent)_[a-zA-Z0-9_]+))")


def label_name(key):
    """A Kubernetes label or annotation key as a Prometheus meta label."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


class PrometheusScrapeTest(unittest.TestCase):

    def setUp(self):
        with open(os.path.join(HERE, "prometheus-scrape.yml")) as f:
            self.config = yaml.safe_load(f)

    def test_promtool_checks_it(self):
        config = copy.deepcopy(self.config)
        for job in config["scrape_configs"]:
            for sd in job.pop("kubernetes_sd_configs"):
                self.assertLessEqual(set(sd), KUBERNETES_SD_FIELDS)
                self.assertIn(sd["role"], KUBERNETES_SD_ROLES)
            # What promtool can check without Kubernetes SD: everything
            # else, relabelling included.
            job["static_configs"] = [{"targets": []}]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "prometheus.yml")
            with open(path, "w") as f:
                yaml.safe_dump(config, f)
            promtool = shutil.which("promtool") or "/usr/bin/promtool"
            result = subprocess.run([promtool, "check", "config", path],
                                    capture_output=True, text=True,
                                    timeout=TIMEOUT_S)
            self.assertEqual(result.returncode, 0,
                             result.stdout + result.stderr)

    def test_it_finds_the_manifests_pods_and_ports(self):
        templates = [t for _, t in pod_specs()]
        for job in self.config["scrape_configs"]:
            with self.subTest(job=job["job_name"]):
                keep = {}
                for rule in job["relabel_configs"]:
                    for source in rule.get("source_labels", []):
                        self.assertRegex(source, POD_META)
                    if rule.get("action") == "keep":
                        keep[rule["source_labels"][0]] = rule["regex"]
                found = []
                for template in templates:
                    meta = {"__meta_kubernetes_pod_label_" + label_name(k): v
                            for k, v in template["metadata"]["labels"].items()}
                    for c in containers(template["spec"]):
                        for port in c.get("ports", []):
                            m = dict(meta)
                            m["__meta_kubernetes_pod_container_port_name"] = (
                                port["name"])
                            m["__meta_kubernetes_pod_phase"] = "Running"
                            if all(re.fullmatch(regex, m.get(label, ""))
                                   for label, regex in keep.items()):
                                found.append((c["name"], port["name"]))
                self.assertEqual(len(found), 1, found)
                self.assertIn(found[0][0], [job["job_name"]])


# ------------------------------------------------------------- the binaries

def helpfull_flags(binary):
    result = subprocess.run([binary, "--helpfull"], capture_output=True,
                            text=True, timeout=TIMEOUT_S)
    flags = set(re.findall(r"^\s+--([A-Za-z0-9_]+) \(", result.stdout +
                           result.stderr, re.M))
    assert len(flags) > 20, f"{binary} --helpfull listed {flags}"
    return flags


class LineReader:
    """Reads a child's output on a thread; `wait_for` blocks until a line
    matching a pattern came (or the child ended, or the deadline passed)."""

    def __init__(self, stream, name):
        self.name = name
        self.lines = []
        self.cond = threading.Condition()
        self.ended = False
        self.thread = threading.Thread(target=self._run, args=(stream,),
                                       daemon=True)
        self.thread.start()

    def _run(self, stream):
        for line in stream:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.ended = True
            self.cond.notify_all()

    def wait_for(self, pattern, count=1):
        regex = re.compile(pattern)

        def hits():
            return [m for m in map(regex.search, self.lines) if m]

        with self.cond:
            self.cond.wait_for(lambda: len(hits()) >= count or self.ended,
                               timeout=TIMEOUT_S)
            found = hits()
            if len(found) < count:
                raise AssertionError(
                    f"{self.name}: no {count} lines matching {pattern!r}:\n" +
                    "\n".join(self.lines))
            return found[count - 1]

    def text(self):
        with self.cond:
            return "\n".join(self.lines)


class Pod:
    """The volumes of one pod spec as folders under `tmp`: a ConfigMap's
    files (with every mount path in them rewritten), an emptyDir or a
    claim empty."""

    def __init__(self, pod_spec, tmp):
        self.spec = pod_spec
        self.dirs = {}
        for volume in pod_spec["volumes"]:
            path = os.path.join(tmp, volume["name"])
            os.makedirs(path)
            self.dirs[volume["name"]] = path

    def materialise(self, containers_):
        for volume in self.spec["volumes"]:
            if "configMap" not in volume:
                continue
            for name, text in configmap_files(
                    volume["configMap"]["name"]).items():
                for c in containers_:
                    text = self.rewrite(c, text)
                with open(os.path.join(self.dirs[volume["name"]], name),
                          "w") as f:
                    f.write(text)

    def rewrite(self, container, text):
        """`text` with the container's mount paths moved to the folders."""
        for mount in sorted(container.get("volumeMounts", []),
                            key=lambda m: -len(m["mountPath"])):
            text = re.sub(re.escape(mount["mountPath"]) + r"(?=/|$|\s)",
                          self.dirs[mount["name"]], text, flags=re.M)
        return text

    def args(self, container, env, overrides):
        """The container's command line as the kubelet would run it here:
        $(VAR)s from `env`, paths rewritten, `overrides` last (Abseil takes
        the last value of a flag)."""
        out = []
        for arg in container.get("args", []):
            arg = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                         lambda m: env[m.group(1)], arg)
            out.append(self.rewrite(container, arg))
        return out + [f"--{k}={v}" for k, v in overrides.items()]


SERVING, NOT_SERVING = 1, 2
# Loopback only: no proxy from the environment for gRPC or HTTP, here and
# in the daemons (gRPC's C core reads http_proxy too).
NO_PROXY = [("grpc.enable_http_proxy", 0)]
CHILD_ENV = {k: v for k, v in os.environ.items()
             if k.lower() not in ("http_proxy", "https_proxy", "grpc_proxy",
                                  "all_proxy")}


def health_request(service):
    """A grpc.health.v1.HealthCheckRequest, encoded by hand: field 1, the
    service name (shorter than 128 bytes)."""
    name = service.encode()
    assert len(name) < 128
    return b"\x0a" + bytes([len(name)]) + name if name else b""


def health_status(answer):
    """The status of a HealthCheckResponse: field 1, an enum."""
    return {b"": 0, b"\x08\x01": SERVING, b"\x08\x02": NOT_SERVING}[answer]


def health_check(address, service):
    """What the kubelet's grpc probe does: grpc.health.v1.Health/Check over
    plaintext; the answer's status."""
    with grpc.insecure_channel(address, options=NO_PROXY) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        return health_status(check(health_request(service),
                                   timeout=TIMEOUT_S))


def wait_for_health(address, service, wanted):
    """Watches `service` until it reports `wanted` (no polling)."""
    with grpc.insecure_channel(address, options=NO_PROXY) as channel:
        watch = channel.unary_stream("/grpc.health.v1.Health/Watch")
        for answer in watch(health_request(service), timeout=TIMEOUT_S):
            if health_status(answer) == wanted:
                return
    raise AssertionError(f"health of {service!r} never became {wanted}")


class BinariesTest(unittest.TestCase):

    def test_every_flag_is_one_the_binary_has(self):
        known = {b: helpfull_flags(path) for b, path in
                 (("dcp-scheduler", SCHEDULER), ("dcp-agent", AGENT))}
        for pod_spec, c, binary in daemon_containers():
            args = flagfile_args(pod_spec, c) + c.get("args", [])
            self.assertTrue(args)
            for arg in args:
                with self.subTest(container=c["name"], arg=arg):
                    self.assertIn(split_flag(arg)[0], known[binary])

    def test_the_job_runs_from_the_manifests(self):
        import dcp  # the sidecar client, as a trainer imports it

        tmp = tempfile.mkdtemp(prefix="dcp-k8s-")
        children = []
        try:
            self._run_job(tmp, children, dcp)
        finally:
            for child, reader in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
                reader.thread.join(timeout=TIMEOUT_S)
                child.stdout.close()
            shutil.rmtree(tmp, ignore_errors=True)

    def _start(self, children, argv, name):
        child = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True,
                                 env=CHILD_ENV)
        reader = LineReader(child.stdout, name)
        children.append((child, reader))
        return child, reader

    def _run_job(self, tmp, children, dcp):
        # The scheduler, from scheduler.yaml and its ConfigMap.
        sched_spec, sched = scheduler_container()
        sched_pod = Pod(sched_spec, os.path.join(tmp, "scheduler"))
        sched_pod.materialise([sched])
        argv = [SCHEDULER] + sched_pod.args(sched, {}, {
            "listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:0"})
        scheduler, sched_log = self._start(children, argv, "dcp-scheduler")
        m = sched_log.wait_for(r"listening on 127\.0\.0\.1:(\d+)")
        address = f"127.0.0.1:{m.group(1)}"
        metrics = sched_log.wait_for(r"metrics on (http://\S+/metrics)")

        # The probes of scheduler.yaml, as the kubelet sends them.
        probes = {p: sched[p]["grpc"].get("service", "") for p in
                  ("startupProbe", "readinessProbe", "livenessProbe")}
        for probe, service in probes.items():
            self.assertEqual(health_check(address, service), SERVING,
                             f"{probe} ({service!r})")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(metrics.group(1), timeout=TIMEOUT_S) as page:
            text = page.read().decode()
        world = int(all_flags(sched_spec, sched)["world_size"])
        self.assertIn(f"dcp_scheduler_world_size {world}", text)

        # Rank 0's agent sidecar and a trainer beside it, from
        # training-job.yaml: the env the kubelet would give them.
        pod_spec, agent = agent_container()
        pod = Pod(pod_spec, os.path.join(tmp, "pod-0"))
        trainer = next(c for c in pod_spec["containers"]
                       if c["name"] == "trainer")
        pod.materialise([agent, trainer])
        env = {"JOB_COMPLETION_INDEX": "0", "POD_NAME": "dcp-train-0-k8sno",
               "POD_IP": "127.0.0.1"}
        host = all_flags(pod_spec, agent)["scheduler"].rsplit(":", 1)[0]
        self.assertTrue(host)
        agent_argv = [AGENT] + pod.args(agent, env, {
            "scheduler": address, "metrics_listen": "127.0.0.1:0"})
        agent_proc, agent_log = self._start(children, agent_argv, "dcp-agent")
        agent_log.wait_for(r"serving on")

        status = json.loads(subprocess.run(
            [CTL, f"--scheduler={address}", "--json", "status"],
            capture_output=True, text=True, check=True, env=CHILD_ENV,
            timeout=TIMEOUT_S).stdout)
        rank0 = status["ranks"][0]
        self.assertTrue(rank0.get("registered"), status)
        self.assertEqual(rank0.get("host"), env["POD_NAME"])

        trainer_env = {e["name"]: e.get("value") for e in trainer["env"]}
        socket = pod.rewrite(trainer, trainer_env["DCP_AGENT_SOCKET"])
        client = dcp.Client(agent_socket=socket, rank=int(env[
            "JOB_COMPLETION_INDEX"]))
        # The look-ahead's steps come (the other ranks never report, so no
        # more are planned), then the drain marker once dcp-ctl drains.
        lookahead = int(all_flags(sched_spec, sched)["lookahead_steps"])
        for expected in range(lookahead):
            step = client.next_step()
            self.assertFalse(step.drained)
            self.assertEqual(step.step, expected)
            client.report_step(step, [0.01] * len(step.tasks))
        subprocess.run([CTL, f"--scheduler={address}", "drain"], check=True,
                       capture_output=True, env=CHILD_ENV, timeout=TIMEOUT_S)
        # Drained: not ready, but alive (the kubelet must not restart it).
        wait_for_health(address, probes["readinessProbe"], NOT_SERVING)
        self.assertEqual(health_check(address, probes["livenessProbe"]),
                         SERVING)
        self.assertTrue(client.next_step().drained)
        client.close()
        # Both exit 0: the agent once its trainer was told of the drain, the
        # scheduler once every stream ended.
        self.assertEqual(agent_proc.wait(timeout=TIMEOUT_S), 0,
                         agent_log.text())
        subprocess.run([CTL, f"--scheduler={address}", "stop"], check=True,
                       capture_output=True, env=CHILD_ENV, timeout=TIMEOUT_S)
        self.assertEqual(scheduler.wait(timeout=TIMEOUT_S), 0,
                         sched_log.text())
        self.assertTrue(os.listdir(sched_pod.dirs["state"]),
                        "--state_dir wrote nothing")


if __name__ == "__main__":
    unittest.main(verbosity=2)
