#!/usr/bin/env bash
# Renders manifests/ from charts/moat, or with --check fails if the committed files differ.
#   manifests/moat.yaml              the chart's default values
#   manifests/moat-single-node.yaml  charts/moat/ci/single-node-values.yaml
# Both as release "moat" in namespace "moat", without the helm test pod, and with the keys in a
# Secret you create (manifests/README.md): a plain manifest cannot generate them once and keep
# them the way `helm install` does.
# usage: deploy/render-manifests.sh [--check] [HELM]
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
helm="${1:-build/deploy-tools/bin/helm}"
[ -x "$helm" ] || { echo "render-manifests: no helm at $helm; run scripts/deploy-tools.sh" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

render() {  # $1 = output file, then extra helm flags
  local out="$1"; shift
  {
    echo "# Rendered from charts/moat by deploy/render-manifests.sh; do not edit (edit the chart)."
    echo "# kubectl create namespace moat; create Secret moat-secrets (manifests/README.md); then"
    echo "# kubectl apply -n moat -f $(basename "$out")"
    "$helm" template moat charts/moat --namespace moat --skip-tests \
      --set secrets.existingSecret=moat-secrets "$@"
  } > "$tmp/$(basename "$out")"
}
render manifests/moat.yaml
render manifests/moat-single-node.yaml -f charts/moat/ci/single-node-values.yaml

status=0
for f in moat.yaml moat-single-node.yaml; do
  if [ $check = 1 ]; then
    if ! diff -u "manifests/$f" "$tmp/$f" > "$tmp/$f.diff"; then
      echo "render-manifests: manifests/$f differs from the chart; run deploy/render-manifests.sh" >&2
      head -40 "$tmp/$f.diff" >&2
      status=1
    fi
  else
    mkdir -p manifests && cp "$tmp/$f" "manifests/$f"
  fi
done
exit $status
