#!/usr/bin/env bash
# The deploy and observability checks: the chart, the plain manifests and the monitoring mixin.
#   fast (no root, ~1 min; CI runs it as the ctest entry deploy_check):
#     helm lint --strict and helm template for every charts/moat/ci/*-values.yaml; rendering
#     fails with the fix named for impossible values; every rendered object validated against
#     the Kubernetes and prometheus-operator schemas; values.schema.json covers every value;
#     manifests/ identical to the chart; the rendered PrometheusRule passes promtool; promtool
#     check rules and test rules (every alert firing once and not once); the dashboard lint and
#     the dashboards type-checked against Grafana's schema (npm @grafana/schema, typescript).
#   --live (root, ~1 min more; the ctest entry deploy_live_check): two real moat-agents doing
#     work, joined to a real moat-controller when the build has one, the helm test's script
#     against it, all scraped by a real Prometheus with the rules loaded
#     (observability/live-check.py).
# usage: scripts/deploy-check.sh [--live | --live-only] [--bin-dir DIR]
#   DIR: where moat-agent, moat-init and moat-probe are (default build/bin). The tools go to
#   $MOAT_DEPLOY_TOOLS (default build/deploy-tools), installed by scripts/deploy-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
live=0
static=1
bin_dir="$PWD/build/bin"
while [ $# -gt 0 ]; do
  case "$1" in
    --live) live=1 ;;
    --live-only) live=1; static=0 ;;
    --bin-dir) bin_dir="$2"; shift ;;
    *) echo "usage: scripts/deploy-check.sh [--live | --live-only] [--bin-dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
for tool in promtool /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "deploy-check: $tool is missing; run scripts/install-deps.sh" >&2; exit 1; }
done
tools="$(scripts/deploy-tools.sh ${MOAT_DEPLOY_TOOLS:+"$MOAT_DEPLOY_TOOLS"})"
helm="$tools/bin/helm"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failed=0
step() { echo "== $*"; }
bad() { echo "FAIL: $*"; failed=1; }

if [ $static = 1 ]; then
step "helm lint --strict and helm template, every ci/ variant"
for values in charts/moat/ci/*-values.yaml; do
  name="$(basename "$values" -values.yaml)"
  "$helm" lint --strict charts/moat -f "$values" > "$tmp/lint-$name.txt" 2>&1 \
    || { cat "$tmp/lint-$name.txt"; bad "helm lint --strict -f $values"; }
  "$helm" template moat charts/moat --namespace moat -f "$values" > "$tmp/render-$name.yaml" \
    || bad "helm template -f $values"
  echo "ok   $name: lint clean, $(grep -c '^kind:' "$tmp/render-$name.yaml") objects"
done

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion; Debian's kube-apiserver).
"$helm" template moat charts/moat --namespace moat --kube-version 1.20.2 \
  -f charts/moat/ci/etcd-ha-values.yaml > "$tmp/render-etcd-ha-k8s-1.20.yaml" \
  && grep -q 'apiVersion: policy/v1beta1' "$tmp/render-etcd-ha-k8s-1.20.yaml" \
  && echo "ok   Kubernetes 1.20: PodDisruptionBudgets as policy/v1beta1" \
  || bad "helm template --kube-version 1.20.2"

step "NOTES.txt renders (helm template leaves it out: rendered here through tpl in a copy)"
cp -r charts/moat "$tmp/notes-chart"
cp charts/moat/templates/NOTES.txt "$tmp/notes-chart/files/notes.txt"
printf '%s\n' 'notes: {{ tpl (.Files.Get "files/notes.txt") . | toJson }}' > "$tmp/notes-chart/templates/notes-check.yaml"
for values in charts/moat/ci/*-values.yaml; do
  if notes="$("$helm" template moat "$tmp/notes-chart" --namespace moat -f "$values" \
      --show-only templates/notes-check.yaml 2>&1)" && grep -q 'helm test moat' <<<"$notes"; then
    echo "ok   NOTES.txt with $(basename "$values")"
  else
    bad "NOTES.txt does not render with $values: $notes"
  fi
done

step "no daemon reads a key or token file straight from a Secret volume (its files are symlinks)"
python3 deploy/check-secret-files.py "$tmp"/render-*.yaml | sed "s|$tmp/||" \
  || bad "a daemon reads a file from a Secret volume"

step "values that cannot work fail rendering and name the fix"
expect_fail() {  # $1 = message the failure must contain; the rest: helm --set flags
  local want="$1"; shift
  if out="$("$helm" template moat charts/moat "$@" 2>&1)"; then
    bad "helm template $* rendered; it must fail"
  elif ! grep -qF -- "$want" <<<"$out"; then
    bad "helm template $* failed without saying \"$want\": $out"
  else
    echo "ok   $*: $want"
  fi
}
expect_fail "needs controller.store=etcd" --set controller.replicas=2
expect_fail "controller.store=etcd needs an etcd" --set controller.store=etcd
expect_fail "choose one" --set controller.store=etcd --set etcd.enabled=true \
  --set 'etcd.externalEndpoints={http://e:2379}'
expect_fail "use an odd number" --set controller.store=etcd --set etcd.enabled=true --set etcd.replicas=2
expect_fail "which agent.policies does not define" --set 'agent.profiles[0].name=p' \
  --set 'agent.profiles[0].policy=missing'
expect_fail "Additional property replica is not allowed" --set controller.replica=2
expect_fail 'controller.store must be one of the following: "sqlite", "etcd"' --set controller.store=postgres
expect_fail "agent.hostPID: Invalid type" --set-string agent.hostPID=yes
expect_fail "agent.restartGrace: Does not match pattern" --set agent.restartGrace=1min

step "sandboxes outlive an agent rollout: the host's pid namespace and a restart grace"
# expect_render NAME PATTERN [helm flags]: the rendered agent objects hold PATTERN.
expect_render() {
  local what="$1" want="$2"; shift 2
  # Rendered first, then searched: `helm ... | grep -q` under pipefail fails whenever grep's
  # early exit makes helm's last writes meet a closed pipe (SIGPIPE), as under load it did.
  local rendered
  rendered="$("$helm" template moat charts/moat "$@" --show-only templates/agent-daemonset.yaml \
    --show-only templates/agent-configmap.yaml 2>&1)" || true
  if grep -qE -- "$want" <<<"$rendered"; then
    echo "ok   $what"
  else
    bad "$what: no \"$want\" in the rendered agent with $*"
  fi
}
expect_render "by default: hostPID" '^      hostPID: true$'
expect_render "by default: restart_grace 120s" '^    restart_grace: 120s$'
expect_render "agent.restartGrace=2m" '^    restart_grace: 2m$' --set agent.restartGrace=2m
expect_render "hostPID=false: no grace (the sandboxes die with the pod)" '^    restart_grace: 0s$' \
  --set agent.hostPID=false
expect_render "hostPID=false" '^      hostPID: false$' --set agent.hostPID=false

step "every rendered object against the Kubernetes and prometheus-operator schemas"
node deploy/validate-k8s.mjs "$tools" "$tmp"/render-*.yaml > "$tmp/validate.txt" \
  && tail -1 "$tmp/validate.txt" || { grep -v '^ok' "$tmp/validate.txt"; bad "schema validation"; }
printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: two}\n' > "$tmp/broken.yaml"
if node deploy/validate-k8s.mjs "$tools" "$tmp/broken.yaml" > /dev/null; then
  bad "the validator passed a Deployment with replicas: two"
fi

step "values.schema.json generated and covering every value; manifests/ as the chart renders"
deploy/values-schema.py --check && echo "ok   values.schema.json" || bad "values.schema.json"
deploy/render-manifests.sh --check "$helm" && echo "ok   manifests/ match the chart" || bad "manifests/"

step "rules: promtool check, the chart's PrometheusRule, promtool test (every alert firing and not)"
promtool check rules charts/moat/files/rules/*.yaml | grep -E 'SUCCESS|FAILED' || bad "promtool check rules"
/usr/bin/python3 - "$tmp/render-monitoring.yaml" "$tmp/prometheusrule.yaml" <<'PY' || bad "no PrometheusRule rendered"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "PrometheusRule"]
assert len(docs) == 1, f"{len(docs)} PrometheusRules"
yaml.safe_dump({"groups": docs[0]["spec"]["groups"]}, open(sys.argv[2], "w"))
# ci/monitoring-values.yaml sets metrics.prometheusRule.runbookUrlBase: every alert points there.
urls = [r["annotations"]["runbook_url"] for g in docs[0]["spec"]["groups"] for r in g["rules"]
        if "alert" in r]
wrong = [u for u in urls if not u.startswith("https://runbooks.example.org/moat/Moat")]
assert urls and not wrong, f"runbook_url not rewritten: {wrong}"
PY
promtool check rules "$tmp/prometheusrule.yaml" >/dev/null && echo "ok   the rendered PrometheusRule parses" \
  || bad "the rendered PrometheusRule"
promtool test rules observability/tests/alerts-test.yaml || bad "promtool test rules"
observability/lint.py rules || bad "alert conventions"

step "dashboards: generated, linted (dashboard-linter's rules), and the lint's own test"
/usr/bin/python3 - "$tmp/render-monitoring.yaml" charts/moat/files/dashboards/*.json <<'PY' \
  && echo "ok   every dashboard is in a grafana_dashboard ConfigMap" || bad "dashboards ConfigMaps"
import json, pathlib, sys, yaml
shipped = {}
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d.get("kind") == "ConfigMap" and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1":
        for key, text in d["data"].items():
            shipped[key] = json.loads(text)["uid"]
want = {pathlib.Path(f).name: json.load(open(f))["uid"] for f in sys.argv[2:]}
assert shipped == want, f"ConfigMaps carry {shipped}, the dashboards are {want}"
PY
observability/dashboards.py --check && echo "ok   dashboards match observability/dashboards.py" \
  || bad "dashboards out of date"
observability/lint.py dashboards || bad "dashboard lint"
node deploy/check-dashboards.mjs "$tools" charts/moat/files/dashboards/*.json || bad "@grafana/schema"
/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d["graphTooltip"] = "shared"
d["panels"][0]["gridPos"]["w"] = "wide"; json.dump(d, open(sys.argv[2], "w"))' \
  charts/moat/files/dashboards/moat-node.json "$tmp/broken-dashboard.json"
if node deploy/check-dashboards.mjs "$tools" "$tmp/broken-dashboard.json" > /dev/null 2>&1; then
  bad "@grafana/schema's check passed a dashboard with graphTooltip and a panel width as strings"
fi
observability/tests/lint_test.sh > "$tmp/lint-test.txt" && echo "ok   the lint catches each rule it enforces" \
  || { cat "$tmp/lint-test.txt"; bad "lint test"; }

fi

if [ $live = 1 ]; then
  step "live: two real agents, a real Prometheus"
  observability/live-check.py --bin-dir "$bin_dir" --helm "$helm" || bad "live check"
fi

if [ $failed = 0 ]; then echo "deploy-check: all passed"; else echo "deploy-check: FAILED"; fi
exit $failed
