#!/usr/bin/env bash
# The chart on a real Kubernetes API server: kube-apiserver and kube-controller-manager built from
# Debian's source package `kubernetes` (scripts/kube-build.sh, cached in /var/cache/moat-kube),
# backed by Debian's etcd, all in a network namespace of their own (only its loopback is used).
# For every charts/moat/ci/*-values.yaml variant, in a namespace of its own:
#   - `helm install` succeeds: every object accepted by the API server (and by helm's check of
#     each against the server's own OpenAPI schema, which refuses fields 1.20 does not know),
#     each object then read back from the server;
#   - `helm upgrade` changes what it should (the agent's configuration and its checksum on the
#     DaemonSet's pods) and keeps the generated keys (the chart reads them back with lookup,
#     which only a real server answers);
#   - `helm uninstall` removes every object except the two the chart keeps on purpose (the keys
#     Secret and SQLite's claim), and a reinstall adopts them with the same keys.
# And: values that cannot work fail `helm install` with the fix named and leave nothing behind;
# an object with a field Kubernetes 1.20 does not know is refused (the check above is real).
# With --kubelet, then the chart's pods on a real node: kubelet, kube-scheduler and kube-proxy
# from the same source, Debian's containerd and runc, the images of scripts/build-images.sh; the
# controller Deployment and the agent DaemonSet Running, the agent joined through the Service,
# `helm test` passing (docs/install-kubernetes.md#a-kubelet-here).
#
# usage: scripts/kube-lane.sh [--keep DIR] [--kubelet | --kubelet-only]   (as root; the first run
#        builds the binaries once into /var/cache/moat-kube; times in docs/install-kubernetes.md)
#   --keep DIR      copy the logs (etcd, the kube daemons, containerd, helm, the pods) there
#   --kubelet-only  the API server, then straight to the kubelet stage (skips the per-variant
#                   install, upgrade and uninstall checks)
# env: MOAT_KUBE_CACHE (default /var/cache/moat-kube), MOAT_DEPLOY_TOOLS (build/deploy-tools)
set -euo pipefail
cd "$(dirname "$0")/.."
keep=""
kubelet=0
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep="$(mkdir -p "$2" && cd "$2" && pwd)"; shift ;;
    --kubelet) kubelet=1 ;;
    --kubelet-only) kubelet=2 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "kube-lane: run as root (builds from Debian source, unshare)" >&2; exit 1; }

if [ -z "${MOAT_KUBE_LANE_INNER:-}" ]; then
  scripts/install-deps.sh --with-kube  # etcd, openssl, node and npm, Debian's Go
  # Both need the network (Debian's archive, the npm registry); the lane itself does not.
  what=(kube-apiserver kube-controller-manager)
  if [ $kubelet != 0 ]; then
    what+=(kube-scheduler kubelet kube-proxy)
    # containerd and runc run the pods; dnsmasq stands in for the cluster DNS; iptables for
    # kube-proxy; the static pause binary is compiled from the Kubernetes source.
    scripts/install-deps.sh --with-images --with-kubelet
    [ -x build/bin/moat-agent ] && [ -x build/bin/moat-controller ] \
      || { echo "kube-lane: --kubelet needs build/bin (scripts/build.sh)" >&2; exit 1; }
    scripts/build-images.sh --arch amd64 > /dev/null
  fi
  bins="$(scripts/kube-build.sh "${what[@]}")"
  tools="$(scripts/deploy-tools.sh ${MOAT_DEPLOY_TOOLS:+"$MOAT_DEPLOY_TOOLS"})"
  # Namespaces of the lane's own: a network namespace (every listener on its loopback; the
  # pods' bridge, kube-proxy's rules and the DNS stand-in in it; nothing the lane starts can
  # reach or be reached from anything else), a mount namespace (the kubelet's and containerd's
  # mounts) and a pid namespace (whatever is left when the lane ends is killed with it).
  src="$(ls -d "${MOAT_KUBE_CACHE:-/var/cache/moat-kube}"/src/kubernetes-*/ | head -1)"
  exec unshare --net --mount --pid --mount-proc --fork env MOAT_KUBE_LANE_INNER=1 \
    MOAT_KUBE_BIN="$bins" MOAT_KUBE_SRC="$src" MOAT_DEPLOY_TOOLS="$tools" \
    "$0" ${keep:+--keep "$keep"} $(case $kubelet in 1) echo --kubelet ;; 2) echo --kubelet-only ;; esac)
fi

ip link set lo up
bins="$MOAT_KUBE_BIN"
app="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/moat/Chart.yaml)"
helm="$MOAT_DEPLOY_TOOLS/bin/helm"
kubectl="$MOAT_DEPLOY_TOOLS/layer/kubectl/kubectl"
work="$(mktemp -d /var/tmp/moat-kube-lane.XXXXXX)"
pids=()
cgroot=moat-kube-lane  # the kubelet's --cgroup-root, in every cgroup v1 hierarchy
# The agent pod's cgroup mount: each hierarchy's moat-kube-lane-sandboxes/, not the host's root,
# so the lane's sandboxes live apart from every other moat on this machine (the agent removes
# moat/ cgroups whose owner pid it cannot see, and from a pod's pid namespace it sees none).
cgsbx=moat-kube-lane-sandboxes
cleanup() {
  local p i f
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$p" 2>/dev/null || true
  done
  # The pods' processes (all in the lane's pid namespace), then their cgroups.
  for f in $(find /sys/fs/cgroup/*/"$cgroot" /sys/fs/cgroup/*/"$cgsbx" -name cgroup.procs 2>/dev/null); do
    for p in $(cat "$f"); do kill -9 "$p" 2>/dev/null || true; done
  done
  sleep 1
  find /sys/fs/cgroup/*/"$cgroot" /sys/fs/cgroup/*/"$cgsbx" -depth -type d -exec rmdir {} \; \
    2>/dev/null || true
  if [ -n "$keep" ]; then
    cp "$work"/*.log "$keep/" 2>/dev/null || true
    # The pods' logs (the kubelet stage's own /var/log/pods).
    if [ $kubelet != 0 ]; then cp -rL /var/log/pods "$keep/pods" 2>/dev/null || true; fi
  fi
  # The kubelet's volumes and the agent's cgroup tree are mounts in the lane's own namespace.
  for f in $(awk -v w="$work/" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount -l "$f" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
start=$SECONDS
failed=0
step() { echo "== $* ($((SECONDS - start)) s)"; }
ok() { echo "ok   $*"; }
bad() { echo "FAIL: $*"; failed=1; }
die() { echo "kube-lane: $*" >&2; for f in "$work"/*.log; do echo "--- $f" >&2; tail -20 "$f" >&2; done; exit 1; }
wait_for() {  # $1 = seconds, the rest: a command that succeeds once ready
  local n=$(($1 * 5)); shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

step "etcd, kube-apiserver and kube-controller-manager on the lane's own loopback"
etcd --name lane --data-dir "$work/etcd" --listen-client-urls http://127.0.0.1:2379 \
  --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster lane=http://127.0.0.1:2380 \
  > "$work/etcd.log" 2>&1 &
pids+=($!)
wait_for 30 curl -sf http://127.0.0.1:2379/health || die "etcd did not start"
openssl genrsa -out "$work/sa.key" 2048 2>/dev/null
openssl rsa -in "$work/sa.key" -pubout -out "$work/sa.pub" 2>/dev/null
admin_token="$(openssl rand -hex 24)"
kcm_token="$(openssl rand -hex 24)"
umask 077
printf '%s,admin,admin,"system:masters"\n%s,system:kube-controller-manager,kcm\n' \
  "$admin_token" "$kcm_token" > "$work/tokens.csv"
# The kubelet's node, kube-scheduler and kube-proxy (--kubelet), in the groups RBAC binds.
printf '%s,system:node:lane,node,"system:nodes"\n%s,system:kube-scheduler,sched\n%s,system:kube-proxy,proxy\n' \
  "$(openssl rand -hex 24)" "$(openssl rand -hex 24)" "$(openssl rand -hex 24)" >> "$work/tokens.csv"
umask 022
"$bins/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 --secure-port=6443 --insecure-port=0 --cert-dir="$work/certs" \
  --token-auth-file="$work/tokens.csv" --authorization-mode=Node,RBAC --allow-privileged=true \
  --service-cluster-ip-range=10.96.0.0/24 --service-account-issuer=https://kubernetes.default.svc \
  --kubelet-preferred-address-types=InternalIP \
  --service-account-key-file="$work/sa.pub" --service-account-signing-key-file="$work/sa.key" \
  > "$work/kube-apiserver.log" 2>&1 &
pids+=($!)
kubeconfig() {  # $1 = file, $2 = token
  KUBECONFIG="$1" "$kubectl" config set-cluster lane --server=https://127.0.0.1:6443 \
    --certificate-authority="$work/certs/apiserver.crt" --embed-certs >/dev/null
  KUBECONFIG="$1" "$kubectl" config set-credentials lane --token="$2" >/dev/null
  KUBECONFIG="$1" "$kubectl" config set-context lane --cluster=lane --user=lane >/dev/null
  KUBECONFIG="$1" "$kubectl" config use-context lane >/dev/null
}
wait_for 60 test -s "$work/certs/apiserver.crt" || die "kube-apiserver wrote no serving certificate"
kubeconfig "$work/admin.kubeconfig" "$admin_token"
kubeconfig "$work/kcm.kubeconfig" "$kcm_token"
export KUBECONFIG="$work/admin.kubeconfig"
k() { "$kubectl" "$@"; }
wait_for 90 k get --raw /readyz || die "kube-apiserver did not become ready"
# The namespace controller (namespaces deleted for real), garbage collection, the ServiceAccount
# token controller: what an uninstall leans on. Each controller acts as its own ServiceAccount,
# with the roles the API server bootstraps for it. With a kubelet, the node lifecycle controller
# too: a kubelet registers its node tainted not-ready, and only that controller lifts the taint
# once the node is Ready (without it nothing is ever scheduled there, not even a DaemonSet's pod).
controllers='*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service,-route'
[ $kubelet = 0 ] || controllers='*,-nodeipam,-cloud-node-lifecycle,-service,-route'
"$bins/kube-controller-manager" --kubeconfig="$work/kcm.kubeconfig" --bind-address=127.0.0.1 \
  --secure-port=10257 --port=0 --service-account-private-key-file="$work/sa.key" \
  --root-ca-file="$work/certs/apiserver.crt" --use-service-account-credentials=true \
  --controllers="$controllers" \
  > "$work/kube-controller-manager.log" 2>&1 &
pids+=($!)
server="$(k version -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
ok "kube-apiserver $server ready on 127.0.0.1:6443, etcd $(etcd --version | sed -n 's/^etcd Version: //p'), helm $("$helm" version --short)"
k apply -f deploy/kube-lane/monitoring-crds.yaml >/dev/null
wait_for 30 k wait --for condition=established --timeout=20s \
  crd/servicemonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com \
  || die "the monitoring CRDs were not established"
k create namespace monitoring >/dev/null

# Each object of a rendered manifest, read back from the server: "KIND NAMESPACE NAME" lines.
objects() {
  python3 - "$1" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d.get("kind"):
        print(d["kind"], d["metadata"].get("namespace", "-"), d["metadata"]["name"])
PY
}
present() {  # $1 = manifest; prints the objects of it the server has
  objects "$1" | while read -r kind ns name; do
    scope=(-n "$ns")
    [ "$ns" != - ] || scope=()
    if k get "$kind" "$name" "${scope[@]}" -o name >/dev/null 2>&1; then echo "$kind $ns $name"; fi
  done
}
secret_data() { k get secret "$2" -n "$1" -o jsonpath='{.data}'; }

if [ $kubelet != 2 ]; then  # the API server checks (--kubelet-only skips them)
step "values that cannot work fail helm install, name the fix and leave nothing"
k create namespace moat-bad >/dev/null
if out="$("$helm" install moat charts/moat -n moat-bad --set controller.replicas=2 2>&1)"; then
  bad "helm install with controller.replicas=2 on SQLite succeeded"
elif ! grep -q "needs controller.store=etcd" <<<"$out"; then
  bad "helm install with controller.replicas=2 failed without naming the fix: $out"
elif [ -n "$("$helm" list -a -n moat-bad -q)" ] || [ -n "$(k get all,secret,configmap -n moat-bad -l app.kubernetes.io/instance=moat -o name)" ]; then
  bad "the refused install left a release or objects behind"
else
  ok "controller.replicas=2 with SQLite: refused, \"needs controller.store=etcd\", nothing left"
fi

step "an object with a field Kubernetes 1.20 does not know is refused (the install check is real)"
cp -r charts/moat "$work/newer-chart"
# hostUsers (a pod's user namespace) arrived in Kubernetes 1.25.
sed -i 's/^      hostIPC: false$/      hostIPC: false\n      hostUsers: false/' \
  "$work/newer-chart/templates/agent-daemonset.yaml"
grep -q 'hostUsers: false' "$work/newer-chart/templates/agent-daemonset.yaml" \
  || die "could not add hostUsers to the agent's pod in the chart's copy"
if out="$("$helm" install moat "$work/newer-chart" -n moat-bad 2>&1)"; then
  bad "a DaemonSet with hostUsers (Kubernetes 1.25) was accepted by a $server server"
  "$helm" uninstall moat -n moat-bad >/dev/null 2>&1 || true
elif ! grep -q 'hostUsers' <<<"$out"; then
  bad "the install with hostUsers failed for another reason: $out"
else
  ok "a pod field from Kubernetes 1.25 refused: $(grep -o '[^:]*hostUsers[^:]*' <<<"$out" | head -1)"
fi

for values in charts/moat/ci/*-values.yaml; do
  name="$(basename "$values" -values.yaml)"
  ns="moat-$name"
  step "$name: helm install, upgrade, uninstall in namespace $ns"
  k create namespace "$ns" >/dev/null
  if grep -q '^  existingSecret: moat-keys' "$values"; then  # the operator's own Secret
    k create secret generic moat-keys -n "$ns" --from-literal=api-keys="lane $(openssl rand -hex 24)" \
      --from-literal=join-token="$(openssl rand -hex 32)" \
      --from-literal=agent-token="$(openssl rand -hex 32)" >/dev/null
  fi
  if ! "$helm" install moat charts/moat -n "$ns" -f "$values" --wait=false > "$work/helm-$name.log" 2>&1; then
    bad "$name: helm install: $(cat "$work/helm-$name.log")"
    continue
  fi
  "$helm" get manifest moat -n "$ns" > "$work/manifest-$name.yaml"
  want="$(objects "$work/manifest-$name.yaml" | sort)"
  have="$(present "$work/manifest-$name.yaml" | sort)"
  if [ "$want" != "$have" ] || [ -z "$want" ]; then
    bad "$name: objects the server lacks after install: $(comm -23 <(echo "$want") <(echo "$have") | tr '\n' ';')"
  else
    ok "$name: installed, all $(wc -l <<<"$want") objects on the server ($(cut -d' ' -f1 <<<"$want" | sort | uniq -c | awk '{printf "%s%s %s", sep, $1, $2; sep=", "}'))"
  fi
  secret="$(objects "$work/manifest-$name.yaml" | awk '$1 == "Secret" {print $3}')"
  secret="${secret:-moat-keys}"
  keys_before="$(secret_data "$ns" "$secret")"
  checksum() { k get daemonset moat-agent -n "$ns" -o jsonpath='{.spec.template.metadata.annotations.checksum/config}'; }
  sum_before="$(checksum)"
  if ! "$helm" upgrade moat charts/moat -n "$ns" --reuse-values --set agent.recycle.perSecond=7 \
      --wait=false >> "$work/helm-$name.log" 2>&1; then
    bad "$name: helm upgrade: $(tail -5 "$work/helm-$name.log")"
  else
    rev="$("$helm" history moat -n "$ns" -o json | python3 -c 'import json,sys; h=json.load(sys.stdin)[-1]; print(h["revision"], h["status"])')"
    conf="$(k get configmap moat-agent -n "$ns" -o jsonpath='{.data.agent\.yaml}')"
    if [ "$rev" != "2 deployed" ]; then
      bad "$name: after the upgrade the release is at \"$rev\", not \"2 deployed\""
    elif ! grep -Eq 'per_second: 7(\.0)?$' <<<"$conf"; then
      bad "$name: the upgrade did not reach the agent's configuration: $(grep -n per_second <<<"$conf")"
    elif [ "$(checksum)" = "$sum_before" ]; then
      bad "$name: the agent pods' checksum/config did not change (no rollout would follow)"
    elif [ "$(secret_data "$ns" "$secret")" != "$keys_before" ]; then
      bad "$name: the upgrade changed the keys in Secret $secret"
    else
      ok "$name: upgraded to revision 2: the agent's configuration and its pods' checksum changed, Secret $secret kept its keys"
    fi
  fi
  if ! "$helm" uninstall moat -n "$ns" >> "$work/helm-$name.log" 2>&1; then
    bad "$name: helm uninstall: $(tail -5 "$work/helm-$name.log")"
    continue
  fi
  left="$(present "$work/manifest-$name.yaml" | sort)"
  kept="$(objects "$work/manifest-$name.yaml" | awk '$1 == "Secret" || $1 == "PersistentVolumeClaim"' | sort)"
  if [ "$left" != "$kept" ]; then
    bad "$name: after uninstall the server has [$(tr '\n' ';' <<<"$left")], expected only [$(tr '\n' ';' <<<"$kept")]"
  else
    ok "$name: uninstalled; left on purpose (helm.sh/resource-policy: keep): [$(cut -d' ' -f1,3 <<<"$kept" | tr '\n' ';' | sed 's/;$//')]"
  fi
  if [ "$name" = default ]; then
    if ! "$helm" install moat charts/moat -n "$ns" -f "$values" --wait=false >> "$work/helm-$name.log" 2>&1; then
      bad "$name: the reinstall after uninstall failed: $(tail -5 "$work/helm-$name.log")"
    elif [ "$(secret_data "$ns" "$secret")" != "$keys_before" ]; then
      bad "$name: the reinstall generated new keys instead of adopting the kept Secret"
    else
      ok "$name: reinstalled: the kept Secret and claim adopted, the same keys"
    fi
  fi
done

step "namespaces deleted for real (kube-controller-manager's namespace controller)"
k delete namespace moat-single-node --wait=false >/dev/null
if wait_for 60 sh -c "! '$kubectl' get namespace moat-single-node -o name"; then
  ok "namespace moat-single-node and what the uninstall kept in it are gone"
else
  bad "namespace moat-single-node is still $(k get namespace moat-single-node -o jsonpath='{.status.phase}')"
fi
fi

if [ $kubelet != 0 ]; then
step "kubelet: the chart's pods on a real node (containerd, runc, kube-scheduler, kube-proxy)"
# What the API server checks left (the default variant's reinstall, the claims kept on purpose)
# goes before a kubelet exists: the node runs this stage's pods only (another release's agent
# would take the machine's own cgroup tree, see agent.cgroupHostPath below).
for n in $(k get namespaces -o name | sed -n 's|^namespace/\(moat-.*\)|\1|p'); do
  "$helm" uninstall moat -n "$n" >/dev/null 2>&1 || true
  k delete namespace "$n" --wait=false >/dev/null
done
ns=moat-kubelet
# The node's network: a bridge in the lane's namespace that the CNI bridge plugin takes for the
# pods (their gateway), the cluster DNS stand-in and kube-proxy's rules all live there.
ip link add lane0 type bridge
ip addr add 10.244.0.1/24 dev lane0
ip link set lane0 up
# The Services' addresses, which kube-proxy's rules translate, reached from the lane itself too
# (a node has them through its default route; the lane has none).
ip route add 10.96.0.0/24 dev lane0
echo 1 > /proc/sys/net/ipv4/ip_forward
# What containerd, runc and the kubelet keep at fixed paths (shim sockets, runc's state, the
# pods' network namespaces, the containers' logs): memory of the lane's own mount namespace.
for d in /run/containerd /run/netns /var/log/pods /var/log/containers; do
  mkdir -p "$d" && mount -t tmpfs -o mode=755 lane "$d"
done
# Their tokens are in the API server's token file from the start.
kubeconfig "$work/kubelet.kubeconfig" "$(awk -F, '$2 == "system:node:lane" {print $1}' "$work/tokens.csv")"
kubeconfig "$work/scheduler.kubeconfig" "$(awk -F, '$2 == "system:kube-scheduler" {print $1}' "$work/tokens.csv")"
kubeconfig "$work/proxy.kubeconfig" "$(awk -F, '$2 == "system:kube-proxy" {print $1}' "$work/tokens.csv")"
"$bins/kube-scheduler" --kubeconfig="$work/scheduler.kubeconfig" --bind-address=127.0.0.1 \
  --secure-port=10259 --port=0 --leader-elect=false > "$work/kube-scheduler.log" 2>&1 &
pids+=($!)

# The pause image: Kubernetes' own pause.c, compiled static, in an image of one file.
gcc -Os -static -o "$work/pause" "$MOAT_KUBE_SRC/build/pause/linux/pause.c"
pctr="$(buildah from scratch)"
buildah copy --quiet "$pctr" "$work/pause" /pause >/dev/null
buildah config --entrypoint '["/pause"]' "$pctr"
buildah commit --quiet --rm "$pctr" localhost/moat/lane-pause:3.2 >/dev/null
mkdir -p "$work/containerd" "$work/cni" "$work/cni-state"
cat > "$work/containerd/config.toml" <<TOML
version = 2
root = "$work/containerd/root"
state = "$work/containerd/state"
[plugins."io.containerd.internal.v1.opt"]
  path = "$work/containerd/opt"
[grpc]
  address = "$work/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.2"
  # The kubelet asks for oom_score_adj -998 for every pod's pause container, and lowering it
  # takes CAP_SYS_RESOURCE, which root lacks on machines like this one (a container itself):
  # runc fails "failed to update /proc/self/oom_score_adj: Permission denied". Restricted,
  # containerd raises any lower score to its own.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$work/cni"
TOML
cat > "$work/cni/10-lane.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "lane", "plugins": [
  {"type": "bridge", "bridge": "lane0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$work/cni-state",
            "ranges": [[{"subnet": "10.244.0.0/24", "gateway": "10.244.0.1"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
containerd --config "$work/containerd/config.toml" > "$work/containerd.log" 2>&1 &
pids+=($!)
ctr_() { ctr --address "$work/containerd/containerd.sock" -n k8s.io "$@"; }
wait_for 30 ctr_ version || die "containerd did not start"
for img in "localhost/moat/lane-pause:3.2 registry.k8s.io/pause:3.2" \
           "localhost/moat/moat-agent:$app-amd64 docker.io/moat/moat-agent:$app" \
           "localhost/moat/moat-controller:$app-amd64 docker.io/moat/moat-controller:$app"; do
  set -- $img
  buildah push --quiet "$1" "docker-archive:$work/image.tar:$2" >/dev/null
  ctr_ images import "$work/image.tar" >/dev/null
  rm -f "$work/image.tar"
done
ok "images imported into containerd: $(ctr_ images ls -q | grep -v '^sha256:' | tr '\n' ' ')"

mkdir -p "$work/kubelet"
for h in /sys/fs/cgroup/*/; do
  [ "$h" = /sys/fs/cgroup/unified/ ] || mkdir -p "$h$cgroot"
done
"$bins/kubelet" --kubeconfig="$work/kubelet.kubeconfig" --hostname-override=lane --node-ip=10.244.0.1 \
  --container-runtime=remote --container-runtime-endpoint="unix://$work/containerd/containerd.sock" \
  --root-dir="$work/kubelet" --cert-dir="$work/kubelet/pki" --cgroup-driver=cgroupfs \
  --cgroup-root="/$cgroot" --fail-swap-on=false --address=10.244.0.1 --port=10250 --read-only-port=0 \
  --healthz-bind-address=127.0.0.1 --cluster-dns=10.244.0.1 --cluster-domain=cluster.local \
  --resolv-conf="" --pod-infra-container-image=registry.k8s.io/pause:3.2 \
  --eviction-hard='' --image-gc-high-threshold=100 --enforce-node-allocatable='' \
  --runtime-request-timeout=10m --oom-score-adj=0 > "$work/kubelet.log" 2>&1 &
pids+=($!)
"$bins/kube-proxy" --kubeconfig="$work/proxy.kubeconfig" --hostname-override=lane \
  --proxy-mode=iptables --masquerade-all --cluster-cidr=10.244.0.0/24 --bind-address=127.0.0.1 \
  --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
  --conntrack-max-per-core=0 --oom-score-adj=0 > "$work/kube-proxy.log" 2>&1 &
pids+=($!)
if wait_for 120 sh -c "'$kubectl' get node lane -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"; then
  ok "node lane registered and Ready"
else
  die "the kubelet's node did not become Ready: $(k get node lane -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' 2>&1)"
fi

# SQLite's claim on a volume of the lane's own (no provisioner here).
mkdir -p "$work/pv" && chown 65532:65532 "$work/pv"
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: lane-controller}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  claimRef: {namespace: $ns, name: moat-controller}
  hostPath: {path: "$work/pv"}
YAML
# The agent's cgroup mount (agent.cgroupHostPath): a tree like /sys/fs/cgroup whose every
# hierarchy is that hierarchy's $cgsbx/ bound in, so the agent makes its moat/ there.
mkdir -p "$work/cgroup"
mount -t tmpfs -o mode=755 lane-cgroup "$work/cgroup"
for h in /sys/fs/cgroup/*/; do
  h="${h%/}"
  mountpoint -q "$h" || continue
  mkdir -p "$h/$cgsbx" "$work/cgroup/${h##*/}"
  # A new cpuset cgroup has no CPUs and no memory nodes until given its parent's.
  if [ -f "$h/cpuset.cpus" ]; then
    cat "$h/cpuset.cpus" > "$h/$cgsbx/cpuset.cpus"
    cat "$h/cpuset.mems" > "$h/$cgsbx/cpuset.mems"
  fi
  mount --bind "$h/$cgsbx" "$work/cgroup/${h##*/}"
done
k create namespace "$ns" >/dev/null
if ! "$helm" install moat charts/moat -n "$ns" --set "tests.image.repository=moat/moat-agent" \
    --set "tests.image.tag=$app" --set networkPolicy.enabled=false --wait=false \
    --set "agent.stateHostPath=$work/agent-state" --set "agent.rootfsHostPath=$work/roots" \
    --set "agent.cgroupHostPath=$work/cgroup" \
    > "$work/helm-kubelet.log" 2>&1; then
  die "helm install for the kubelet: $(cat "$work/helm-kubelet.log")"
fi
# The cluster DNS stand-in: each Service's name and ClusterIP, as CoreDNS would answer them.
k get svc -A -o jsonpath='{range .items[*]}{.spec.clusterIP} {.metadata.name}.{.metadata.namespace}.svc.cluster.local{"\n"}{end}' \
  | grep -v '^None ' > "$work/hosts"
# --local: every other name under cluster.local is NXDOMAIN, so a resolver walking its search
# list goes on to the next suffix (without it, dnsmasq refuses them and glibc gives up).
dnsmasq --keep-in-foreground --no-resolv --no-hosts --addn-hosts="$work/hosts" --local=/cluster.local/ \
  --listen-address=10.244.0.1 --bind-interfaces --user=root --pid-file="$work/dnsmasq.pid" \
  --log-facility="$work/dnsmasq.log" &
pids+=($!)
if k -n "$ns" rollout status deployment/moat-controller --timeout=300s > "$work/rollout.log" 2>&1 \
   && k -n "$ns" rollout status daemonset/moat-agent --timeout=300s >> "$work/rollout.log" 2>&1; then
  ok "the controller Deployment and the agent DaemonSet are rolled out: $(k -n "$ns" get pods -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}')"
else
  bad "pods did not start: $(cat "$work/rollout.log"; k -n "$ns" get pods -o wide; k -n "$ns" describe pods | tail -40)"
fi
key="$(k -n "$ns" get secret moat-secrets -o jsonpath='{.data.api-keys}' | base64 -d | awk 'NF && $1 !~ /^#/ {print $NF; exit}')"
ctl_ip="$(k -n "$ns" get svc moat-controller -o jsonpath='{.spec.clusterIP}')"
if wait_for 120 sh -c "curl -sf -H 'OPEN-SANDBOX-API-KEY: $key' http://$ctl_ip:8080/v1/nodes | grep -q '\"state\": *\"Ready\"'"; then
  ok "the agent joined the controller through the Service ($ctl_ip) and is Ready"
else
  bad "no Ready node at the controller: $(curl -s -H "OPEN-SANDBOX-API-KEY: $key" "http://$ctl_ip:8080/v1/nodes")"
fi
# Without --logs: the test pod is deleted once it succeeded (hook-succeeded), before helm could
# read its log; the agent's log shows the sandbox it made and removed.
if "$helm" test moat -n "$ns" --timeout 5m > "$work/helm-test.log" 2>&1 \
   && grep -q 'Phase: *Succeeded' "$work/helm-test.log"; then
  ok "helm test passed: $(cat /var/log/pods/"${ns}"_moat-test_*/test/*.log 2>/dev/null | sed -n 's/.* stdout F ok: //p' | tr '\n' ';')"
  ok "the agent's log: $(k -n "$ns" logs daemonset/moat-agent | grep -E 'created sandbox|recycled sandbox' | tail -2 | sed 's/^moat-agent info: //' | tr '\n' ';')"
else
  bad "helm test: $(cat "$work/helm-test.log")"
fi
fi

if [ $failed = 0 ]; then echo "kube-lane: all passed ($((SECONDS - start)) s)"; else echo "kube-lane: FAILED"; fi
exit $failed
