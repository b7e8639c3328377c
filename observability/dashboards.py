#!/usr/bin/python3
"""Generates moat's Grafana dashboards (the mixin's source; the JSON files are its output).

    observability/dashboards.py             writes charts/moat/files/dashboards/*.json
    observability/dashboards.py --check     fails if those files differ from what it generates

Rules every panel follows (observability/lint.py checks them on the JSON): the datasource is the
`datasource` variable; every selector carries `cluster`, a `job` variable and, for the agents'
metrics, `instance`; every rate() and increase() uses $__rate_interval; uids are fixed here.
Panels marked CONTROLLER read moat-controller's metrics (docs/monitoring.md#controller-metrics).
"""

import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent.parent / "charts/moat/files/dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
AGENT = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'
CTRL = 'cluster=~"$cluster", job=~"$controller_job"'
RI = "$__rate_interval"


def target(expr, legend, ref):
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, "range": True}


def panel(kind, title, description, targets, unit="short", width=8, height=8, **extra):
    field_defaults = {"unit": unit}
    if "min" in extra:
        field_defaults["min"] = extra.pop("min")
    if "max" in extra:
        field_defaults["max"] = extra.pop("max")
    p = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"w": width, "h": height},
        "fieldConfig": {"defaults": field_defaults, "overrides": []},
        "options": {},
        "targets": [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(targets)],
    }
    if kind == "timeseries":
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "none"}}
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    p.update(extra)
    return p


def ts(title, description, targets, unit="short", **kw):
    return panel("timeseries", title, description, targets, unit, **kw)


def stat(title, description, targets, unit="short", **kw):
    return panel("stat", title, description, targets, unit, width=kw.pop("width", 4),
                 height=kw.pop("height", 4), **kw)


def row(title):
    return {"type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"w": 24, "h": 1}}


def quantiles(metric, sel, by="", qs=(0.5, 0.99)):
    group = f"{by}, le" if by else "le"
    return [(f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{sel}}}[{RI}])))",
             f"p{int(q * 100)}" + (f" {{{{{by}}}}}" if by else "")) for q in qs]


def datasource_var():
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "hide": 0, "refresh": 1, "regex": "",
            "options": [], "includeAll": False, "multi": False}


def query_var(name, label, query, multi=True, hide=0):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"{name}-var"},
            "hide": hide, "refresh": 2, "regex": "", "sort": 1, "options": [],
            "includeAll": multi, "multi": multi, **({"allValue": ".*"} if multi else {})}


def layout(panels):
    """Places panels left to right in rows of 24 columns; a row panel starts a new line."""
    x = y = line_h = 0
    for i, p in enumerate(panels):
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if p["type"] == "row" or x + w > 24:
            y += line_h
            x = line_h = 0
        p["gridPos"] = {"x": x, "y": y, "w": w, "h": h}
        p["id"] = i + 1
        x += w
        line_h = max(line_h, h)
        if p["type"] == "row":
            y += h
            x = line_h = 0
    return panels


def dashboard(uid, title, description, panels, variables, tags):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["moat"] + tags,
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "links": [{"title": "moat dashboards", "type": "dashboards", "tags": ["moat"],
                   "asDropdown": True, "icon": "external link", "includeVars": True,
                   "keepTime": True, "targetBlank": False, "tooltip": "", "url": ""}],
        "annotations": {"list": []},
        "templating": {"list": variables},
        "panels": layout(panels),
    }


def agent_panels():
    """The agents' panels, over the nodes the instance variable selects."""
    out = [row("Utilization: allocated vs capacity")]
    for what, used, cap, unit in [
            ("CPU", "moat_node_cpu_allocated_cores", "moat_node_cpu_capacity_cores", "short"),
            ("Memory", "moat_node_memory_used_bytes", "moat_node_memory_capacity_bytes", "bytes"),
            ("Processes", "moat_node_pids_used", "moat_node_pids_capacity", "short")]:
        out.append(ts(f"{what}: sandboxes vs node", f"{what} charged to sandboxes against what "
                      "the node(s) have.", [(f"sum({used}{{{AGENT}}})", "used by sandboxes"),
                                            (f"sum({cap}{{{AGENT}}})", "capacity")], unit))
    out.append(ts("Utilization by node", "Each node's CPU allocated, memory and processes used, "
                  "as a fraction of its capacity (recording rules instance:moat_node_*:ratio).",
                  [(f"instance:moat_node_cpu_allocated:ratio{{{AGENT}}}", "cpu {{instance}}"),
                   (f"instance:moat_node_memory_used:ratio{{{AGENT}}}", "memory {{instance}}"),
                   (f"instance:moat_node_pids_used:ratio{{{AGENT}}}", "pids {{instance}}")],
                  "percentunit", width=24, min=0, max=1))
    out.append(row("Sandboxes and warm pools"))
    out.append(ts("Sandboxes by state", "Sandboxes on the node(s) in each state; running means "
                  "a command is in flight.",
                  [(f"sum by (state) (moat_sandboxes{{{AGENT}}})", "{{state}}")]))
    out.append(ts("Warm pool depth vs target", "Warm sandboxes ready per profile, against the "
                  "target the pool follows (last hour's request rate, within floor and ceiling).",
                  [(f"sum by (profile) (moat_pool_depth{{{AGENT}}})", "depth {{profile}}"),
                   (f"sum by (profile) (moat_pool_target{{{AGENT}}})", "target {{profile}}")]))
    out.append(ts("Warm pool misses", "Creates that found the profile's pool empty and were "
                  "made cold.", [(f"sum by (profile) (rate(moat_pool_misses_total{{{AGENT}}}[{RI}]))",
                                  "{{profile}}")], "reqps"))
    out.append(ts("Sandbox start latency", "From a create request to a usable sandbox, warm "
                  "(from the pool) and cold.",
                  quantiles("moat_sandbox_start_seconds", AGENT, "path"), "s"))
    out.append(ts("Command latency", "Wall time of commands run through the execd API, from "
                  "request to exit.", quantiles("moat_command_duration_seconds", AGENT), "s"))
    out.append(ts("Commands per second", "Commands run through the execd API.",
                  [(f"sum(rate(moat_command_duration_seconds_count{{{AGENT}}}[{RI}]))",
                    "commands")], "ops"))
    out.append(row("Security"))
    out.append(ts("Violations by kind", "Policy violations the probes and egress proxies saw: "
                  "forbidden syscalls, host mounts, processes, limits, denied egress.",
                  [(f"sum by (kind) (rate(moat_violations_total{{{AGENT}}}[{RI}]))", "{{kind}}")],
                  "ops"))
    out.append(ts("Compromised sandboxes", "Sandboxes whose probe missed its heartbeats in a "
                  "row: killed and recycled. Any non-zero value deserves a look.",
                  [(f"sum by (instance) (increase(moat_compromised_sandboxes_total{{{AGENT}}}[{RI}]))",
                    "{{instance}}")]))
    out.append(ts("Probe heartbeat misses", "Heartbeats that did not arrive in time: a loaded "
                  "node; runs of them end in a compromised sandbox.",
                  [(f"sum by (instance) (rate(moat_heartbeat_misses_total{{{AGENT}}}[{RI}]))",
                    "{{instance}}")], "ops"))
    out.append(ts("Egress requests and denials", "Requests sandboxes made through their egress "
                  "proxies, and those refused.",
                  [(f"sum(rate(moat_egress_requests_total{{{AGENT}}}[{RI}]))", "requests"),
                   (f"sum(rate(moat_egress_denials_total{{{AGENT}}}[{RI}]))", "denials")],
                  "reqps", width=12))
    out.append(row("Recycling"))
    out.append(ts("Recycle backlog", "Sandboxes waiting in the rate-limited recycle queue; a "
                  "growing backlog means the node recycles slower than sandboxes end.",
                  [(f"sum by (instance) (moat_recycle_backlog{{{AGENT}}})", "{{instance}}")],
                  width=12))
    out.append(ts("Recycle duration", "Kill the tree, remove the cgroup, unmount and verify, "
                  "remove the workspace and check for residue.",
                  quantiles("moat_recycle_duration_seconds", AGENT), "s", width=12))
    return out


def controller_panels():
    c = "CONTROLLER: needs moat-controller's metrics. "
    return [
        row("Controller (scheduling, API, store)"),
        stat("Leader", c + "1 while a controller replica holds the leader lease.",
             [(f"max(moat_controller_leader{{{CTRL}}})", "leader")]),
        stat("Pending sandboxes", c + "Sandboxes waiting for a node that fits.",
             [(f"sum(moat_controller_pending_sandboxes{{{CTRL}}})", "pending")]),
        ts("Nodes by state", c + "Nodes the controller knows, by state (Ready, NotReady, "
           "Lost).", [(f"sum by (state) (moat_controller_nodes{{{CTRL}}})", "{{state}}")],
           width=8),
        ts("Nodes by architecture", c + "Nodes by CPU architecture.",
           [(f"sum by (arch) (moat_controller_nodes{{{CTRL}}})", "{{arch}}")]),
        ts("Sandboxes by state (controller)", c + "Sandboxes by lifecycle state.",
           [(f"sum by (state) (moat_controller_sandboxes{{{CTRL}}})", "{{state}}")]),
        ts("Allocated vs allocatable", c + "What schedulers have placed, as a fraction of what "
           "nodes offer, per resource.",
           [(f"sum by (resource) (moat_controller_allocated{{{CTRL}}}) / sum by (resource) "
             f"(moat_controller_allocatable{{{CTRL}}})", "{{resource}}")], "percentunit",
           min=0, max=1),
        ts("API latency by route (p99)", c + "Controller API latency, 99th percentile, by route.",
           quantiles("moat_controller_request_duration_seconds", CTRL, "route", (0.99,)), "s"),
        ts("API requests by code", c + "Controller API requests per second by status code.",
           [(f"sum by (code) (rate(moat_controller_request_duration_seconds_count{{{CTRL}}}[{RI}]))",
             "{{code}}")], "reqps"),
        ts("Create to ready", c + "From a create request to a ready sandbox.",
           quantiles("moat_controller_create_to_ready_seconds", CTRL), "s"),
        ts("Scheduling latency", c + "Time the scheduler takes to place one sandbox.",
           quantiles("moat_controller_scheduling_duration_seconds", CTRL), "s"),
        ts("Store latency (p99)", c + "SQLite or etcd operations, 99th percentile, by operation.",
           quantiles("moat_controller_store_request_duration_seconds", CTRL, "op", (0.99,)), "s"),
    ]


def common_vars(instance_multi):
    return [
        datasource_var(),
        query_var("cluster", "cluster", "label_values(moat_sandboxes, cluster)"),
        query_var("job", "job", 'label_values(moat_sandboxes{cluster=~"$cluster"}, job)'),
        query_var("instance", "instance",
                  'label_values(moat_sandboxes{cluster=~"$cluster", job=~"$job"}, instance)',
                  multi=instance_multi),
    ]


def fleet():
    overview = [
        stat("Nodes reporting", "Agents Prometheus scrapes now.",
             [(f"count(up{{{AGENT}}} == 1)", "up")]),
        stat("Sandboxes", "All sandboxes on the selected nodes.",
             [(f"sum(moat_sandboxes{{{AGENT}}})", "sandboxes")]),
        stat("Fleet CPU allocated", "CPU quotas of all sandboxes over all nodes' cores "
             "(recording rule cluster:moat_node_cpu_allocated:ratio when all are selected).",
             [(f"sum(moat_node_cpu_allocated_cores{{{AGENT}}}) / "
               f"sum(moat_node_cpu_capacity_cores{{{AGENT}}})", "cpu")], "percentunit"),
        stat("Fleet memory used", "Memory charged to sandboxes over all nodes' memory.",
             [(f"sum(moat_node_memory_used_bytes{{{AGENT}}}) / "
               f"sum(moat_node_memory_capacity_bytes{{{AGENT}}})", "memory")], "percentunit"),
        stat("Warm pool fill", "Warm sandboxes ready over the pools' targets.",
             [(f"sum(moat_pool_depth{{{AGENT}}}) / sum(moat_pool_target{{{AGENT}}})", "pool")],
             "percentunit"),
        stat("Compromised (range)", "Sandboxes declared compromised in the selected range.",
             [(f"sum(increase(moat_compromised_sandboxes_total{{{AGENT}}}[$__range]))",
               "compromised")]),
    ]
    variables = common_vars(True) + [query_var(
        "controller_job", "controller job",
        'label_values(up{cluster=~"$cluster", job=~".*controller.*"}, job)')]
    return dashboard("moat-fleet", "moat / Fleet", "All moat nodes and the controller: capacity, "
                     "sandboxes, warm pools, security events, recycling, scheduling and API.",
                     overview + agent_panels() + controller_panels(), variables, ["fleet"])


def node():
    overview = [
        stat("Agent up", "1 while Prometheus scrapes this agent.",
             [(f"max(up{{{AGENT}}})", "up")]),
        stat("Sandboxes", "Sandboxes on this node.",
             [(f"sum(moat_sandboxes{{{AGENT}}})", "sandboxes")]),
        stat("CPU allocated", "Sandboxes' CPU quotas over the node's cores.",
             [(f"max(instance:moat_node_cpu_allocated:ratio{{{AGENT}}})", "cpu")], "percentunit"),
        stat("Memory used", "Memory charged to sandboxes over the node's memory.",
             [(f"max(instance:moat_node_memory_used:ratio{{{AGENT}}})", "memory")],
             "percentunit"),
        stat("Recycle backlog", "Sandboxes waiting to be recycled.",
             [(f"sum(moat_recycle_backlog{{{AGENT}}})", "backlog")]),
        stat("Compromised (range)", "Sandboxes declared compromised in the selected range.",
             [(f"sum(increase(moat_compromised_sandboxes_total{{{AGENT}}}[$__range]))",
               "compromised")]),
    ]
    return dashboard("moat-node", "moat / Node", "One moat node: its agent's sandboxes, warm "
                     "pools, probes, egress and recycling.", overview + agent_panels(),
                     common_vars(False), ["node"])


TENANT = 'cluster=~"$cluster", job=~"$job", instance=~"$instance", tenant=~"$tenant"'
CTRL_NODE = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'


def tenant_usage(metric):
    # Every controller replica exports the usage it computes from the shared store; max() keeps
    # a tenant counted once however many replicas the instance variable selects.
    return f"max by (tenant) ({metric}{{{TENANT}}})"


def tenant():
    """One or more tenants (controller/tenants/): what they hold, what their quotas refused,
    their share of the fleet; the pre-check and approvals (controller-wide) below."""
    overview = [
        stat("Tenants active", "Tenants holding sandboxes now (among those selected).",
             [(f"count({tenant_usage('moat_controller_tenant_sandboxes')} > 0) or vector(0)",
               "tenants")]),
        stat("Sandboxes", "Pending and Running sandboxes the selected tenants hold.",
             [(f"sum({tenant_usage('moat_controller_tenant_sandboxes')})", "sandboxes")]),
        stat("CPU requested", "Cores the selected tenants' sandboxes request (what max_cpu "
             "counts).", [(f"sum({tenant_usage('moat_controller_tenant_cpu_cores')})", "cores")]),
        stat("Memory requested", "Bytes the selected tenants' sandboxes request (what "
             "max_memory counts).",
             [(f"sum({tenant_usage('moat_controller_tenant_memory_bytes')})", "memory")], "bytes"),
        stat("Quota rejections (range)", "Creates a quota refused in the selected range.",
             [(f"sum(increase(moat_controller_quota_rejections_total{{{TENANT}}}[$__range]))",
               "rejections")]),
        stat("Approvals pending", "High-risk commands waiting for an administrator (all "
             "tenants).", [(f"max(moat_controller_approvals_pending{{{CTRL_NODE}}})", "pending")]),
    ]
    usage = [
        row("Usage by tenant"),
        ts("Sandboxes by tenant", "Pending and Running sandboxes each tenant holds; against "
           "its max_sandboxes quota (moat tenant ls).",
           [(tenant_usage("moat_controller_tenant_sandboxes"), "{{tenant}}")]),
        ts("CPU requested by tenant", "Cores each tenant's sandboxes request.",
           [(tenant_usage("moat_controller_tenant_cpu_cores"), "{{tenant}}")]),
        ts("Memory requested by tenant", "Bytes each tenant's sandboxes request.",
           [(tenant_usage("moat_controller_tenant_memory_bytes"), "{{tenant}}")], "bytes"),
        ts("Share of the fleet's CPU", "Each tenant's requested cores over what the fleet's "
           "nodes offer (moat_controller_allocatable): who fills the fleet.",
           [(f"{tenant_usage('moat_controller_tenant_cpu_cores')} / scalar(max("
             f"moat_controller_allocatable{{{CTRL_NODE}, resource=\"cpu\"}}))", "{{tenant}}")],
           "percentunit", width=12, min=0),
        ts("Share of the fleet's memory", "Each tenant's requested memory over the fleet's "
           "allocatable memory.",
           [(f"{tenant_usage('moat_controller_tenant_memory_bytes')} / scalar(max("
             f"moat_controller_allocatable{{{CTRL_NODE}, resource=\"memory\"}}))",
             "{{tenant}}")], "percentunit", width=12, min=0),
        row("Quotas"),
        ts("Quota rejections by tenant", "Creates refused per second, by tenant and the quota "
           "that refused them: max_sandboxes, max_cpu, max_memory (403), creates_per_minute "
           "(429).",
           [(f"sum by (tenant, quota) (rate(moat_controller_quota_rejections_total{{{TENANT}}}"
             f"[{RI}]))", "{{tenant}} {{quota}}")], "reqps", width=12),
        panel("bargauge", "Top tenants by sandboxes", "The ten tenants holding the most "
              "sandboxes now.",
              [(f"topk(10, {tenant_usage('moat_controller_tenant_sandboxes')})", "{{tenant}}")],
              width=12, options={"displayMode": "gradient", "orientation": "horizontal",
                                 "reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                                   "values": False},
                                 "showUnfilled": True}),
        row("Pre-check and approvals (all tenants)"),
        ts("Commands scanned by risk", "Commands the pre-check scanned per second, by the "
           "risk it found (medium runs under the stricter policy, high waits for approval).",
           [(f"sum by (risk) (rate(moat_controller_precheck_scans_total{{{CTRL_NODE}}}[{RI}]))",
             "{{risk}}")], "ops", width=12),
        ts("Held commands decided", "High-risk commands decided since the controller started, "
           "by outcome (approved, rejected, timed out); pending ones beside them.",
           [(f"max by (outcome) (moat_controller_approvals_decided{{{CTRL_NODE}}})",
             "{{outcome}}"),
            (f"max(moat_controller_approvals_pending{{{CTRL_NODE}}})", "pending")], width=12),
    ]
    variables = [
        datasource_var(),
        query_var("cluster", "cluster", "label_values(moat_controller_tenant_sandboxes, cluster)"),
        query_var("job", "controller job",
                  'label_values(moat_controller_tenant_sandboxes{cluster=~"$cluster"}, job)'),
        query_var("instance", "controller replica",
                  'label_values(moat_controller_tenant_sandboxes{cluster=~"$cluster", '
                  'job=~"$job"}, instance)'),
        query_var("tenant", "tenant",
                  'label_values(moat_controller_tenant_sandboxes{cluster=~"$cluster", '
                  'job=~"$job", instance=~"$instance"}, tenant)'),
    ]
    return dashboard("moat-tenant", "moat / Tenant", "One or more moat tenants: the sandboxes, "
                     "CPU and memory they hold, their share of the fleet, what their quotas "
                     "refused; the pre-check and approvals.", overview + usage, variables,
                     ["tenant"])


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, d in [("moat-fleet.json", fleet()), ("moat-node.json", node()),
                    ("moat-tenant.json", tenant())]:
        text = json.dumps(d, indent=2, sort_keys=True) + "\n"
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("dashboards.py: out of date (run observability/dashboards.py): " + " ".join(stale),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
