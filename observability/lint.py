#!/usr/bin/python3
"""Lints moat's monitoring mixin: the rules of Grafana's dashboard-linter (not installable here)
plus the alert conventions, and lists what the live check (observability/live-check.sh) asks
Prometheus for.

  lint.py dashboards [FILE..] datasource/cluster/job/instance variables, every panel and target
                              on ${datasource}, $__rate_interval in every rate, job/instance
                              matchers on every selector (and tenant, on a dashboard with a
                              tenant variable), stable unique uids, valid PromQL
                              (each expression parsed by `promtool check rules`)
  lint.py rules               severity/summary/description/runbook_url on every alert, a runbook
                              in docs/runbooks/ for each, each alert tested firing and not firing
  lint.py queries             prints "source<TAB>expr" for every dashboard target and rule, with
                              the dashboard variables replaced for a live Prometheus
  lint.py metrics             prints every metric name those expressions read
Exit status 1 with one line per problem.
"""

import json
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DASHBOARDS = sorted((ROOT / "charts/moat/files/dashboards").glob("*.json"))
RULE_FILES = sorted((ROOT / "charts/moat/files/rules").glob("*.yaml"))
ALERT_TESTS = ROOT / "observability/tests/alerts-test.yaml"
RUNBOOKS = ROOT / "docs/runbooks"
STABLE_UIDS = {"moat-fleet", "moat-node", "moat-tenant"}
SEVERITIES = {"critical", "warning", "info"}
# Metrics with a tenant label: on a dashboard with a tenant variable they must be filtered by it.
TENANT_METRICS = ("moat_controller_tenant_", "moat_controller_quota_rejections_total")
RANGE_FUNCS = ("rate", "irate", "increase", "delta", "idelta", "deriv")
# Values a live check gives the dashboards' variables.
LIVE_VARS = {"$__rate_interval": "30s", "$__range": "5m", "$cluster": ".*", "$job": "moat-agent",
             "$instance": ".*", "$controller_job": "moat-controller", "$tenant": ".*"}
# Dashboards whose job variable selects the controller, not the agents.
LIVE_VARS_BY_UID = {"moat-tenant": {"$job": "moat-controller"}}

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def selectors(expr):
    """(metric, {label: value}) for each vector selector in a PromQL expression."""
    out = []
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    for m in re.finditer(r'([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\})?',
                         text):
        name, braces = m.group(1), m.group(2)
        if not name and not braces:
            continue
        if name and not braces:
            # A bare identifier: a function, keyword or aggregation unless it names a metric.
            rest = text[m.end():].lstrip()
            if rest.startswith("(") or not (name.startswith("moat_") or name == "up" or
                                             ":moat_" in name):
                continue
        labels = dict(re.findall(r'([a-zA-Z_]\w*)\s*=~?\s*"((?:[^"\\]|\\.)*)"', braces or ""))
        out.append((name or labels.get("__name__", ""), labels))
    return out


def metric_names(expr):
    return {n for n, _ in selectors(expr) if n}


def promql_valid(exprs):
    """Parses each (where, expr) with promtool: a recording rule per expression."""
    if not exprs:
        return
    rules = {"groups": [{"name": "lint", "rules": [
        {"record": f"lint:expr{i}", "expr": e} for i, (_, e) in enumerate(exprs)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(rules, f)
        f.flush()
        r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
    if r.returncode != 0:
        for i, (where, e) in enumerate(exprs):
            if f"lint:expr{i}\"" in r.stdout + r.stderr or f"expr{i}" in r.stdout + r.stderr:
                problem(where, f"PromQL does not parse: {e}")
        problem("promtool", (r.stdout + r.stderr).strip().replace("\n", " | "))


def dashboard_targets(d):
    for p in d.get("panels", []):
        for t in p.get("targets", []):
            yield p, t


def lint_dashboards(paths):
    uids = {}
    exprs = []
    for path in paths:
        path = pathlib.Path(path).resolve()
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        d = json.loads(path.read_text())
        uid = d.get("uid", "")
        if uid not in STABLE_UIDS:
            problem(name, f'uid "{uid}" is not one of the stable uids {sorted(STABLE_UIDS)}')
        if uid in uids:
            problem(name, f'uid "{uid}" also used by {uids[uid]}')
        uids[uid] = name
        variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
        ds = variables.get("datasource")
        if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
            problem(name, "needs a datasource variable of type datasource, query prometheus")
        for v in ("cluster", "job", "instance"):
            if v not in variables:
                problem(name, f"needs a {v} variable")
        for v in variables.values():
            if v.get("type") == "query" and v.get("datasource", {}).get("uid") != "${datasource}":
                problem(name, f"variable {v['name']} must query ${{datasource}}")
        for p in d.get("panels", []):
            if p.get("type") == "row":
                continue
            where = f"{name}: panel \"{p.get('title')}\""
            if p.get("datasource", {}).get("uid") != "${datasource}":
                problem(where, "panel datasource must be ${datasource}")
            if not p.get("targets"):
                problem(where, "has no targets")
            for t in p.get("targets", []):
                expr = t.get("expr", "")
                if t.get("datasource", {}).get("uid") != "${datasource}":
                    problem(where, "target datasource must be ${datasource}")
                lint_expr(where, expr, "tenant" in variables)
                exprs.append((where, substitute(expr, uid)))
    promql_valid(exprs)


def lint_expr(where, expr, tenant_var=False):
    bare = strip_strings(expr)
    for fn in RANGE_FUNCS:
        for m in re.finditer(rf"\b{fn}\s*\(", bare):
            window = re.match(r"[^\[]*\[([^\]]*)\]", bare[m.end():])
            if not window:
                problem(where, f"{fn}() without a range: {expr}")
            elif window.group(1) != "$__rate_interval" and not (
                    fn == "increase" and window.group(1) == "$__range"):
                problem(where, f"{fn}() must use [$__rate_interval], not [{window.group(1)}]")
    sels = selectors(expr)
    if not sels:
        problem(where, f"no metric selector found in {expr}")
    for metric, labels in sels:
        if not re.fullmatch(r"\$\w+", labels.get("job", "")):
            problem(where, f"{metric} needs a job=~\"$job\" matcher (a variable)")
        if labels.get("cluster") != "$cluster":
            problem(where, f"{metric} needs a cluster=~\"$cluster\" matcher")
        if not metric.startswith("moat_controller_") and labels.get("instance") != "$instance":
            problem(where, f"{metric} needs an instance=~\"$instance\" matcher")
        if tenant_var and metric.startswith(TENANT_METRICS) and labels.get("tenant") != "$tenant":
            problem(where, f"{metric} needs a tenant=~\"$tenant\" matcher")


def substitute(expr, uid=None):
    """expr with the dashboard variables replaced by what a live check gives them (the
    dashboard's uid picks its own values where LIVE_VARS_BY_UID says so)."""
    values = dict(LIVE_VARS, **LIVE_VARS_BY_UID.get(uid, {}))
    for k in sorted(values, key=len, reverse=True):
        expr = expr.replace(k, values[k])
    return expr


def rules():
    for path in RULE_FILES:
        for g in yaml.safe_load(path.read_text())["groups"]:
            for r in g["rules"]:
                yield path.relative_to(ROOT), r


def lint_rules():
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    firing, quiet = set(), set()
    for t in tests["tests"]:
        for a in t.get("alert_rule_test", []):
            (firing if a.get("exp_alerts") else quiet).add(a["alertname"])
    alerts = set()
    for path, r in rules():
        if "alert" not in r:
            continue
        name = r["alert"]
        where = f"{path}: {name}"
        if name in alerts:
            problem(where, "defined twice")
        alerts.add(name)
        if r.get("labels", {}).get("severity") not in SEVERITIES:
            problem(where, f"needs labels.severity, one of {sorted(SEVERITIES)}")
        ann = r.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                problem(where, f"needs annotations.{key}")
        url = ann.get("runbook_url", "")
        if url != f"docs/runbooks/{name}.md":
            problem(where, f"runbook_url must be docs/runbooks/{name}.md (the chart rewrites the "
                    "prefix), not " + url)
        elif not (ROOT / url).is_file():
            problem(where, f"runbook {url} does not exist: write it")
        if name not in firing:
            problem(where, f"no test in {ALERT_TESTS.name} where it fires")
        if name not in quiet:
            problem(where, f"no test in {ALERT_TESTS.name} where it does not fire")
    for name in (firing | quiet) - alerts:
        problem(ALERT_TESTS.name, f"tests {name}, which no rule file defines")
    for page in RUNBOOKS.glob("*.md"):
        if page.stem not in alerts and page.stem != "README":
            problem(page.relative_to(ROOT), "runbook for an alert that does not exist")


def queries():
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        for p, t in dashboard_targets(d):
            yield f"{path.name}: {p['title']} [{t['refId']}]", substitute(t["expr"], d.get("uid"))
    for path, r in rules():
        yield f"{path.name}: {r.get('alert') or r.get('record')}", " ".join(r["expr"].split())


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "dashboards":
        lint_dashboards(sys.argv[2:] or DASHBOARDS)
    elif cmd == "rules":
        lint_rules()
    elif cmd == "queries":
        for where, e in queries():
            print(f"{where}\t{e}")
    elif cmd == "metrics":
        names = set()
        for _, e in queries():
            names |= metric_names(e)
        print("\n".join(sorted(names)))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    if cmd in ("dashboards", "rules"):
        print(f"lint {cmd}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
