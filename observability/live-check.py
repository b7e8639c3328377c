#!/usr/bin/python3
"""The mixin against real components: two real moat-agents, configured by the chart's own
rendered agent.yaml, doing a little work, scraped by a real Prometheus (Debian `prometheus`)
that loads the chart's alert and recording rules. Everything listens on 127.0.0.1 only.

Checks:
  1. `promtool check metrics` is clean on every agent's /metrics;
  2. every metric a dashboard or rule names that the agent exports is in the live scrape, and
     every recording rule over agent metrics produces series;
  3. every dashboard query over agent metrics returns data;
  4. Prometheus loaded every rule and evaluates each without error.
Queries over moat_controller_* wait for a running controller: they are listed, not failed.

usage: observability/live-check.py [--bin-dir DIR] [--helm HELM] [--keep DIR]
                                    [--render DIR [--linger SECONDS]]
  --bin-dir  where moat-agent, moat-init and moat-probe are (default: build/bin)
  --keep     write the scrape, the query results and the logs there (for docs and debugging)
  --render   after the checks, keep the agents busy for --linger seconds (default 300), then
             draw the dashboards into DIR (observability/render-dashboards.py, which needs
             python3-matplotlib): how docs/images/ is made
Needs root (the agents make namespaces and cgroups).
"""

import argparse
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "observability"))
import lint  # noqa: E402

failures = []


def fail(what):
    failures.append(what)
    print(f"FAIL {what}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, token=None, body=None, header="Authorization", timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header(header, f"Bearer {token}" if header == "Authorization" else token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def chart_file(helm, template, key, *sets):
    """One configuration file as the chart renders it."""
    args = [helm, "template", "live", str(ROOT / "charts/moat"), "--show-only", template]
    for kv in sets:
        args += ["--set", kv]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return yaml.safe_load(yaml.safe_load(out)["data"][key])


def chart_test_script(helm):
    """The helm test pod's shell script, as the chart renders it."""
    out = subprocess.run([helm, "template", "live", str(ROOT / "charts/moat"), "--show-only",
                          "templates/tests/test-sandbox.yaml"], check=True, capture_output=True,
                         text=True).stdout
    return yaml.safe_load(out)["spec"]["containers"][0]["args"][0]


def secret_file(path, text):
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def start_daemon(daemon, binary, config):
    """Writes the daemon's YAML config into its directory and starts it there, its stderr in a
    log beside the config; sets daemon.log, daemon.proc and daemon.url (its loopback port)."""
    name = binary.name.removeprefix("moat-")
    (daemon.dir / f"{name}.yaml").write_text(yaml.safe_dump(config))
    daemon.log = open(daemon.dir / f"{name}.log", "w")
    daemon.proc = subprocess.Popen([str(binary), "--config", str(daemon.dir / f"{name}.yaml")],
                                   stdout=subprocess.DEVNULL, stderr=daemon.log)
    daemon.url = f"http://127.0.0.1:{daemon.port}"


class Controller:
    """A real moat-controller on the controller.yaml the chart renders (paths and the listen
    address changed for this machine)."""

    def __init__(self, bin_dir, helm, work):
        self.dir = work / "controller"
        self.dir.mkdir(mode=0o700)
        (self.dir / "state").mkdir(mode=0o700)
        self.key = secrets.token_hex(24)
        self.join_token = secret_file(self.dir / "join-token", secrets.token_hex(32) + "\n")
        self.port = free_port()
        config = chart_file(helm, "templates/controller-configmap.yaml", "controller.yaml")
        # An admin key turns tenants with quotas on (the tenant dashboard reads them).
        self.admin_key = secrets.token_hex(24)
        self.tenant_keys = {}
        config.update(listen={"address": "127.0.0.1", "port": self.port},
                      state_dir=str(self.dir / "state"), join_token_file=self.join_token,
                      api_keys_file=secret_file(self.dir / "api-keys", f"live {self.key}\n"),
                      admin_key_file=secret_file(self.dir / "admin.key", self.admin_key + "\n"))
        start_daemon(self, bin_dir / "moat-controller", config)
        self.name = "controller"

    def api(self, method, path, body=None, timeout=60, key=None):
        return http(method, self.url + path, key or self.key, body,
                    header="OPEN-SANDBOX-API-KEY", timeout=timeout)

    def admin(self, method, path, body=None):
        return http(method, self.url + path, self.admin_key, body)

    def wait_healthy(self):
        for _ in range(200):
            if self.proc.poll() is not None:
                raise RuntimeError("moat-controller exited at start: " +
                                   (self.dir / "controller.log").read_text()[-2000:])
            try:
                if http("GET", self.url + "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("moat-controller did not become healthy")

    def metrics(self):
        return http("GET", self.url + "/metrics")[1]

    def stop(self):
        Agent.stop(self)


class Agent:
    def __init__(self, name, bin_dir, config, work, controller=None):
        self.name = name
        self.dir = work / name
        self.dir.mkdir(mode=0o700)
        self.token = secrets.token_hex(32)
        token_file = self.dir / "token"
        token_file.write_text(self.token + "\n")
        token_file.chmod(0o600)
        self.port = free_port()
        config = dict(config, listen={"address": "127.0.0.1", "port": self.port},
                      token_file=str(token_file), state_dir=str(self.dir / "state"))
        if controller:
            # What the pod's command fills in (node name, pod address), and this machine's paths.
            config["controller"] = dict(config["controller"], url=controller.url,
                                        join_token_file=controller.join_token, node_name=name,
                                        advertise_url=f"http://127.0.0.1:{self.port}")
        (self.dir / "state").mkdir(mode=0o700)
        start_daemon(self, bin_dir / "moat-agent", config)

    def wait_healthy(self):
        for _ in range(200):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start: " +
                                   (self.dir / "agent.log").read_text()[-2000:])
            try:
                if http("GET", self.url + "/health", self.token, timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not become healthy")

    def create(self, body):
        code, text = http("POST", self.url + "/v1/sandboxes", self.token, body)
        if code not in (200, 201):
            raise RuntimeError(f"{self.name}: create {body} answered {code}: {text}")
        d = json.loads(text)
        return d["id"], d["token"]

    def run(self, sandbox, command):
        sid, token = sandbox
        code, text = http("POST", f"{self.url}/v1/sandboxes/{sid}/execd/command", token,
                          {"command": command}, header="X-EXECD-ACCESS-TOKEN", timeout=60)
        if code != 200:
            raise RuntimeError(f"{self.name}: command answered {code}: {text}")
        return text

    def delete(self, sandbox):
        http("DELETE", f"{self.url}/v1/sandboxes/{sandbox[0]}", self.token)

    def metrics(self):
        return http("GET", self.url + "/metrics", self.token)[1]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def work(agent):
    """A little of everything the dashboards show: warm and cold starts, commands, forbidden
    syscalls, denied egress, deletes (recycling)."""
    boxes = [agent.create({"profile": "default"}) for _ in range(3)]
    boxes.append(agent.create({"profile": "default", "limits": {"memory_bytes": 128 << 20}}))
    for b in boxes:
        out = agent.run(b, "echo live-check-$((6*7))")
        if "live-check-42" not in out:
            fail(f"{agent.name}: a command's output lacks live-check-42: {out[:300]}")
    agent.run(boxes[0], "unshare -U true; mount -t tmpfs x /tmp; true")
    egress = agent.create({"profile": "default",
                           "policy": {"network": {"allowedDomains": ["allowed.invalid"]}}})
    agent.run(egress, "curl -s -m 5 -o /dev/null http://denied.invalid/ || true")
    boxes.append(egress)
    for b in boxes[:-1]:
        agent.delete(b)
    return boxes[-1:]


def fleet_work(ctl, helm, nodes):
    """Through the controller: both nodes join and are Ready; the helm test's own script
    (create a sandbox, run a command through the proxy, delete) passes against it; a few more
    creates and an unknown route for the API panels."""
    for _ in range(100):
        code, text = ctl.api("GET", "/v1/nodes")
        ready = [n for n in json.loads(text).get("items", [])
                 if n.get("state") == "Ready"] if code == 200 else []
        if len(ready) == nodes:
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"{nodes} agents did not join the controller as Ready: {code} {text}")
    print(f"ok   both agents joined moat-controller and are Ready")
    script = chart_test_script(helm)
    keys = ctl.dir / "api-keys"
    r = subprocess.run(["/bin/sh", "-c", script.replace("/etc/moat/secrets/api-keys", str(keys))],
                       env=dict(os.environ, MOAT_URL=ctl.url, MOAT_IMAGE="python:3.11"),
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        fail(f"the helm test's script against moat-controller: {r.stdout}{r.stderr}")
    else:
        print("ok   the helm test's script passes against moat-controller: " +
              " / ".join(r.stdout.strip().splitlines()[1:]))
    body = {"image": {"uri": "python:3.11"}, "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 300, "resourceLimits": {"cpu": "500m", "memory": "256Mi"}}
    for _ in range(3):
        code, text = ctl.api("POST", "/v1/sandboxes", body)
        if code in (200, 201, 202):
            ctl.api("DELETE", f"/v1/sandboxes/{json.loads(text)['id']}")
        else:
            fail(f"create through moat-controller answered {code}: {text[:300]}")
    ctl.api("GET", "/v1/sandboxes/no-such-sandbox")


SMALL = {"image": {"uri": "python:3.11"}, "entrypoint": ["tail", "-f", "/dev/null"],
         "timeout": 900, "resourceLimits": {"cpu": "250m", "memory": "128Mi"}}
# Tenants made through the admin API: acme may hold two sandboxes, globex one core.
TENANTS = {"acme": {"max_sandboxes": 2}, "globex": {"max_cpu": 1}}


def tenant_work(ctl):
    """For the tenant dashboard: two tenants with quotas and keys made through the admin API,
    each holding sandboxes, acme refused by its max_sandboxes quota once. Returns what they
    hold: [(tenant, sandbox id)]."""
    for name, quota in TENANTS.items():
        code, text = ctl.admin("POST", "/v1/admin/tenants", {"name": name, "quota": quota})
        if code != 201:
            raise RuntimeError(f"making tenant {name} answered {code}: {text[:300]}")
        code, text = ctl.admin("POST", f"/v1/admin/tenants/{name}/keys")
        if code != 201:
            raise RuntimeError(f"a key for tenant {name} answered {code}: {text[:300]}")
        ctl.tenant_keys[name] = json.loads(text)["key"]
    held = []
    for name, n in (("acme", 2), ("globex", 1)):
        for _ in range(n):
            code, text = ctl.api("POST", "/v1/sandboxes", SMALL, key=ctl.tenant_keys[name])
            if code not in (200, 201, 202):
                raise RuntimeError(f"create as tenant {name} answered {code}: {text[:300]}")
            held.append((name, json.loads(text)["id"]))
    code, text = ctl.api("POST", "/v1/sandboxes", SMALL, key=ctl.tenant_keys["acme"])
    if code != 403 or "max_sandboxes" not in text:
        fail(f"acme's third sandbox: {code} {text[:300]}, expected 403 naming max_sandboxes")
    else:
        print("ok   tenants acme and globex hold sandboxes; acme's quota refused a third (403)")
    return held


def tenant_round(ctl, rnd, held):
    """One round of tenant load for the pictures: a create (which the quotas may refuse) and a
    delete now and then."""
    name = rnd.choice(sorted(ctl.tenant_keys))
    code, text = ctl.api("POST", "/v1/sandboxes", SMALL, key=ctl.tenant_keys[name])
    if code in (200, 201, 202):
        held.append((name, json.loads(text)["id"]))
    while held and (len(held) > 4 or rnd.random() < 0.3):
        t, sid = held.pop(rnd.randrange(len(held)))
        ctl.api("DELETE", f"/v1/sandboxes/{sid}", key=ctl.tenant_keys[t])


def busy(agents, seconds, ctl=None):
    """Uneven load for the pictures: bursts of creates, commands, violations and deletes (a
    controller in the list gets a create and a delete now and then)."""
    import random
    rnd = random.Random(7)
    end = time.time() + seconds
    held = {a.name: [] for a in agents}
    tenant_held = []
    errors = []
    while time.time() < end:
        try:
            busy_round(agents, ctl, rnd, held)
            if ctl and ctl.tenant_keys:
                tenant_round(ctl, rnd, tenant_held)
        except RuntimeError as e:  # a load generator: report, do not stop the pictures
            errors.append(str(e))
            print(f"busy: {e}", flush=True)
        time.sleep(rnd.uniform(0.5, 3))
    for a in agents:
        for b in held[a.name]:
            a.delete(b)
    for t, sid in tenant_held:
        ctl.api("DELETE", f"/v1/sandboxes/{sid}", key=ctl.tenant_keys[t])
    if errors:
        print(f"busy: {len(errors)} request(s) failed while the agents were kept busy")


def busy_round(agents, ctl, rnd, held):
    """One round of busy(): creates, commands, a violation or a denied request, deletes."""
    for a in agents:
        for _ in range(rnd.randint(0, 3)):
            held[a.name].append(a.create({"profile": "default"}))
        for b in held[a.name][-2:]:
            a.run(b, "seq 1 2000 | sort -n | tail -1" if rnd.random() < 0.7
                  else "unshare -U true; true")
        if rnd.random() < 0.15:  # a denied egress request now and then
            e = a.create({"profile": "default",
                          "policy": {"network": {"allowedDomains": ["allowed.invalid"]}}})
            a.run(e, "curl -s -m 5 -o /dev/null http://denied.invalid/ || true")
            held[a.name].append(e)
        while len(held[a.name]) > rnd.randint(0, 6):
            a.delete(held[a.name].pop(0))
    if ctl and rnd.random() < 0.5:
        body = {"image": {"uri": "python:3.11"}, "entrypoint": ["tail", "-f", "/dev/null"],
                "timeout": 300, "resourceLimits": {"cpu": "250m", "memory": "128Mi"}}
        code, text = ctl.api("POST", "/v1/sandboxes", body)
        if code in (200, 201, 202):
            sid = json.loads(text)["id"]
            ctl.api("POST", f"/v1/sandboxes/{sid}/proxy/44772/command",
                    {"command": "echo through-the-controller"})
            ctl.api("GET", "/v1/sandboxes")
            ctl.api("DELETE", f"/v1/sandboxes/{sid}")


def prometheus(work_dir, agents, port, controller=None):
    rules = [str(p) for p in lint.RULE_FILES]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "external_labels": {"cluster": "live"}},
        "rule_files": rules,
        "scrape_configs": [{
            "job_name": "moat-agent",
            "authorization": {"credentials_file": str(a.dir / "token")},
            "static_configs": [{"targets": [f"127.0.0.1:{a.port}"],
                                "labels": {"node": a.name}}],
        } for a in agents],
    }
    # One job name, one scrape config per agent (each has its own token): Prometheus wants job
    # names unique, so name them apart and relabel job back to moat-agent.
    for i, sc in enumerate(config["scrape_configs"]):
        sc["job_name"] = f"moat-agent-{i}"
        sc["relabel_configs"] = [{"target_label": "job", "replacement": "moat-agent"}]
    if controller:
        config["scrape_configs"].append({
            "job_name": "moat-controller",
            "static_configs": [{"targets": [f"127.0.0.1:{controller.port}"]}]})
    # Recording rules evaluate every 30s in the chart; here every second, so a short run sees them.
    fast_rules = []
    for path in lint.RULE_FILES:
        doc = yaml.safe_load(path.read_text())
        for g in doc["groups"]:
            g["interval"] = "1s"
        out = work_dir / path.name
        out.write_text(yaml.safe_dump(doc))
        fast_rules.append(str(out))
    config["rule_files"] = fast_rules
    (work_dir / "prometheus.yml").write_text(yaml.safe_dump(config))
    subprocess.run(["promtool", "check", "config", str(work_dir / "prometheus.yml")], check=True,
                   capture_output=True)
    log = open(work_dir / "prometheus.log", "w")
    proc = subprocess.Popen(["prometheus", f"--config.file={work_dir / 'prometheus.yml'}",
                             f"--storage.tsdb.path={work_dir / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=log)
    return proc, log


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    code, text = http("GET", url)
    d = json.loads(text)
    if d.get("status") != "success":
        raise RuntimeError(f"query {expr} failed: {text[:300]}")
    return d["data"]["result"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=str(ROOT / "build/bin"))
    ap.add_argument("--helm", default=str(ROOT / "build/deploy-tools/bin/helm"))
    ap.add_argument("--keep", default="")
    ap.add_argument("--controller", choices=["auto", "on", "off"], default="auto",
                    help="a real moat-controller too (auto: when --bin-dir has moat-controller)")
    ap.add_argument("--render", default="")
    ap.add_argument("--linger", type=int, default=300)
    ap.add_argument("--hold", type=int, default=0, help=argparse.SUPPRESS)  # renderer work
    args = ap.parse_args()
    bin_dir = pathlib.Path(args.bin_dir)
    for b in ("moat-agent", "moat-init", "moat-probe"):
        if not (bin_dir / b).is_file():
            print(f"live-check: {bin_dir / b} is missing; build it (cmake --build build --target "
                  "moat-agent moat-init moat-probe) or pass --bin-dir", file=sys.stderr)
            return 2
    for tool in ("prometheus", "promtool"):
        if not shutil.which(tool):
            print(f"live-check: {tool} is missing; run scripts/install-deps.sh", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("live-check: needs root (the agents make namespaces and cgroups)", file=sys.stderr)
        return 2

    with_controller = args.controller == "on" or (
        args.controller == "auto" and (bin_dir / "moat-controller").is_file())
    work_dir = pathlib.Path(tempfile.mkdtemp(prefix="moat-live-check-", dir="/var/tmp"))
    config = chart_file(args.helm, "templates/agent-configmap.yaml", "agent.yaml",
                        f"agent.joinController={str(with_controller).lower()}")
    agents, prom, prom_log, ctl = [], None, None, None
    prom_port = free_port()
    try:
        if with_controller:
            ctl = Controller(bin_dir, args.helm, work_dir)
            ctl.wait_healthy()
            print(f"ok   moat-controller runs the chart's controller.yaml ({ctl.url})")
        agents = [Agent(f"node-{i}", bin_dir, config, work_dir, ctl) for i in (1, 2)]
        for a in agents:
            a.wait_healthy()
        print(f"ok   two agents run the chart's agent.yaml ({', '.join(a.url for a in agents)})")
        prom, prom_log = prometheus(work_dir, agents, prom_port, ctl)
        if ctl:
            fleet_work(ctl, args.helm, len(agents))
            tenant_held = tenant_work(ctl)
        live = [work(a) for a in agents]
        print("ok   the agents did work: warm and cold starts, commands, violations, egress, "
              "deletes")

        # 1. promtool check metrics on each agent's (and the controller's) /metrics.
        for a in agents + ([ctl] if ctl else []):
            text = a.metrics()
            r = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                               capture_output=True)
            if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
                fail(f"promtool check metrics on {a.name}: {(r.stdout + r.stderr).strip()}")
            else:
                print(f"ok   promtool check metrics is clean on {a.name}'s /metrics")

        # Wait until both targets are up and a rate window (30s) holds samples.
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if len(query(prom_port, 'up{job="moat-agent"} == 1')) == len(agents):
                    break
            except (OSError, RuntimeError):
                pass
            time.sleep(1)
        else:
            raise RuntimeError("Prometheus never scraped both agents: " +
                               (work_dir / "prometheus.log").read_text()[-2000:])
        for a, boxes in zip(agents, live):  # more work while Prometheus watches
            a.run(boxes[0], "echo again; unshare -U true; true")
        time.sleep(35)

        # 2. Every agent metric named by a dashboard or rule is in the live scrape.
        names = set()
        for _, e in lint.queries():
            names |= lint.metric_names(e)
        exported = {n for n in names if n.startswith("moat_") and
                    not n.startswith("moat_controller_")}
        recorded = {n for n in names if ":" in n and "controller" not in n}
        for n in sorted(exported | recorded | {"up"}):
            # cluster:* rules aggregate the job label away.
            sel = f'__name__="{n}"' + ("" if n.startswith("cluster:") else ', job="moat-agent"')
            if not query(prom_port, f"count({{{sel}}})"):
                fail(f"metric {n} (named by a dashboard or rule) is not in the live scrape")
        print(f"ok   checked {len(exported)} exported and {len(recorded)} recorded metric names "
              "against the live scrape")

        # The controller's metrics it exports now; queries over others wait for it.
        ctl_names = set()
        if ctl:
            for line in ctl.metrics().splitlines():
                if line.startswith("moat_controller_"):
                    ctl_names.add(line.split("{")[0].split(" ")[0])
            # The tenant dashboard reads only the controller: each metric it names must be
            # in the controller's scrape, none may wait.
            tenant_names = {n for where, e in lint.queries() if where.startswith("moat-tenant")
                            for n in lint.metric_names(e)}
            for n in sorted(tenant_names - ctl_names):
                fail(f"metric {n} (named by the tenant dashboard) is not in moat-controller's "
                     "scrape")
            print(f"ok   all {len(tenant_names)} metrics the tenant dashboard names are in "
                  "moat-controller's scrape" if tenant_names <= ctl_names else
                  "FAIL the tenant dashboard names metrics moat-controller does not export")

        # 3. Every dashboard query over agent metrics (and exported controller ones) has data.
        waiting, results = [], {}
        for where, expr in lint.queries():
            if not where.endswith("]"):
                continue  # rules: below
            if any(n.startswith("moat_controller_") and n not in ctl_names
                   for n in lint.metric_names(expr)):
                waiting.append(where)
                continue
            res = query(prom_port, expr)
            results[where] = {"expr": expr, "result": res}
            if not res:
                fail(f"{where} returns no data: {expr}")
        print(f"ok   {len(results)} dashboard queries answered"
              f"{' (the controller scraped too)' if ctl else ''}; {len(waiting)} wait for "
              "controller metrics not exported yet")

        # 4. Rules loaded and evaluated without error.
        d = json.loads(http("GET", f"http://127.0.0.1:{prom_port}/api/v1/rules")[1])
        loaded = [r for g in d["data"]["groups"] for r in g["rules"]]
        want = sum(1 for _ in lint.rules())
        if len(loaded) != want:
            fail(f"Prometheus loaded {len(loaded)} rules, the rule files have {want}")
        for r in loaded:
            if r.get("health") != "ok":
                fail(f"rule {r['name']} health {r.get('health')}: {r.get('lastError')}")
        print(f"ok   Prometheus loaded and evaluates all {len(loaded)} rules")

        if args.render:
            busy(agents, args.linger, ctl)
            r = subprocess.run([str(ROOT / "observability/render-dashboards.py"),
                                f"http://127.0.0.1:{prom_port}", args.render, "--minutes",
                                str(max(2, args.linger // 60 + 1))])
            if r.returncode != 0:
                fail("render-dashboards.py failed")
            if args.hold:
                print(f"holding Prometheus at http://127.0.0.1:{prom_port} for {args.hold}s",
                      flush=True)
                busy(agents, args.hold, ctl)

        if args.keep:
            keep = pathlib.Path(args.keep)
            keep.mkdir(parents=True, exist_ok=True)
            (keep / "queries.json").write_text(json.dumps(results, indent=1))
            for a in agents:
                (keep / f"{a.name}.metrics").write_text(a.metrics())
            (keep / "prometheus-url").write_text(f"http://127.0.0.1:{prom_port}\n")
    finally:
        for a in agents + ([ctl] if ctl else []):
            a.stop()
        if prom:
            prom.terminate()
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
            prom_log.close()
        if args.keep:
            for p in list(work_dir.glob("*/agent.log")) + list(work_dir.glob("*/controller.log")):
                shutil.copy(p, pathlib.Path(args.keep) / f"{p.parent.name}.log")
            shutil.copy(work_dir / "prometheus.log", pathlib.Path(args.keep) / "prometheus.log")
        shutil.rmtree(work_dir, ignore_errors=True)
    print(f"live-check: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
