#!/usr/bin/env bash
# Shows that observability/lint.py catches each rule it enforces: the shipped dashboards pass,
# and a copy broken in one way at a time fails with the matching message.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
lint="$here/observability/lint.py"
src="$here/charts/moat/files/dashboards/moat-node.json"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0

"$lint" dashboards >/dev/null || { echo "FAIL: the shipped dashboards do not lint"; fail=1; }

expect() {  # $1 = python expression that breaks dashboard d; $2 = message the lint must print
  # $3 = the dashboard to break (default: the node dashboard)
  /usr/bin/python3 - "${3:-$src}" "$tmp/broken.json" "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(d, open(sys.argv[2], "w"))
PY
  if out="$("$lint" dashboards "$tmp/broken.json" 2>&1)"; then
    echo "FAIL: lint passed a dashboard broken by: $1"; fail=1
  elif ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL: lint did not say \"$2\" for: $1"; echo "$out"; fail=1
  else
    echo "ok: $2"
  fi
}
first='[p for p in d["panels"] if p.get("targets")][0]'
expect 'd["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "datasource"]' \
  "needs a datasource variable"
expect 'd["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "job"]' \
  "needs a job variable"
expect 'd["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "instance"]' \
  "needs a instance variable"
expect 'd["uid"] = "abc123"' 'is not one of the stable uids'
expect "$first"'["datasource"] = {"type": "prometheus", "uid": "prom-1"}' \
  'panel datasource must be ${datasource}'
expect "$first"'["targets"][0]["expr"] = "sum(rate(moat_violations_total{cluster=~\"\$cluster\", job=~\"\$job\", instance=~\"\$instance\"}[5m]))"' \
  'rate() must use [$__rate_interval], not [5m]'
expect "$first"'["targets"][0]["expr"] = "sum(moat_sandboxes{cluster=~\"\$cluster\", instance=~\"\$instance\"})"' \
  'moat_sandboxes needs a job=~"$job" matcher'
expect "$first"'["targets"][0]["expr"] = "sum(moat_sandboxes{cluster=~\"\$cluster\", job=~\"\$job\"})"' \
  'moat_sandboxes needs an instance=~"$instance" matcher'
expect "$first"'["targets"][0]["expr"] = "sum(moat_sandboxes{cluster=~\"\$cluster\", job=~\"\$job\", instance=~\"\$instance\"}"' \
  'PromQL does not parse'
# The tenant dashboard: its tenant metrics must follow the tenant variable.
tenant="$here/charts/moat/files/dashboards/moat-tenant.json"
expect "$first"'["targets"][0]["expr"] = "sum(moat_controller_tenant_sandboxes{cluster=~\"\$cluster\", job=~\"\$job\", instance=~\"\$instance\"})"' \
  'moat_controller_tenant_sandboxes needs a tenant=~"$tenant" matcher' "$tenant"
expect 'd["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "job"]' \
  "needs a job variable" "$tenant"
exit $fail
