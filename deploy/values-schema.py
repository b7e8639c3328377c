#!/usr/bin/python3
"""Writes charts/moat/values.schema.json (JSON Schema draft-07, which helm enforces on install,
upgrade, lint and template). Every value in values.yaml is described; unknown keys are refused
(additionalProperties: false), so a typo in a values file fails instead of being ignored.

    deploy/values-schema.py          write it
    deploy/values-schema.py --check  fail if the committed file differs
"""
import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent.parent / "charts/moat/values.schema.json"


def obj(props, desc=None, required=None, extra=False):
    o = {"type": "object", "properties": props, "additionalProperties": extra}
    if desc:
        o["description"] = desc
    if required:
        o["required"] = required
    return o


def s(desc, **kw):
    return {"type": "string", "description": desc, **kw}


def i(desc, **kw):
    return {"type": "integer", "description": desc, **kw}


def n(desc, **kw):
    return {"type": "number", "description": desc, **kw}


def b(desc):
    return {"type": "boolean", "description": desc}


def free(desc):
    return {"type": "object", "description": desc}


def arr(desc, items=None, **kw):
    return {"type": "array", "description": desc, "items": items or {}, **kw}


QUANTITY = {"type": ["string", "number"], "description": "a Kubernetes quantity (500m, 1Gi)", "pattern": r"^[0-9.]+([eE][0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$"}
SIZE = {"type": ["string", "integer"], "pattern": r"^[0-9]+(K|M|G|T|KiB|MiB|GiB|TiB)?$",
        "description": "a size such as 512MiB, 1G or a number of bytes"}
DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$",
            "description": "a duration such as 5s, 30m, 24h"}
PULL = s("Image pull policy", enum=["Always", "IfNotPresent", "Never"])


def image(desc):
    return obj({"repository": s("Image repository", minLength=1),
                "tag": s("Image tag; empty uses the chart's appVersion"),
                "pullPolicy": PULL}, desc, ["repository"])


def resources(desc):
    q = {"type": "object", "additionalProperties": QUANTITY, "description": "cpu, memory, ..."}
    return obj({"requests": q, "limits": q, "claims": arr("Dynamic resource claims")}, desc)


LIMITS = obj({"cpus": n("CPU quota in cores", minimum=0.01, maximum=4096),
              "memory": SIZE, "pids": i("Process limit", minimum=1, maximum=4194304),
              "workspace": SIZE}, "The sandbox's limits (node-agent/config.h)")
PROFILE = obj({
    "name": s("Profile name: 1 to 32 lower-case letters, digits, - or _",
              pattern=r"^[a-z0-9_-]{1,32}$"),
    "root": s("A directory under agent.rootfsHostPath holding the profile's root filesystem",
              pattern=r"^[^/].*$"),
    "policy": s("A key of agent.policies"),
    "limits": LIMITS,
    "pool": obj({"floor": i("Warm sandboxes kept at least", minimum=0, maximum=10000),
                 "ceiling": i("Warm sandboxes kept at most", minimum=0, maximum=10000)},
                "The profile's warm pool")}, "One sandbox profile", ["name"])

SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "moat chart values",
    **obj({
        "nameOverride": s("Overrides the chart name in object names"),
        "fullnameOverride": s("Overrides the full name in object names"),
        "commonLabels": {"type": "object", "additionalProperties": {"type": "string"},
                         "description": "Labels added to every object"},
        "imagePullSecrets": arr("Secrets for pulling images",
                                obj({"name": s("Secret name")}, required=["name"])),
        "controller": obj({
            "image": image("The controller's image"),
            "replicas": i("Controller replicas; more than 1 needs store=etcd", minimum=1),
            "store": s("sqlite (one replica on a PVC) or etcd", enum=["sqlite", "etcd"]),
            "service": obj({"type": s("Service type", enum=["ClusterIP", "NodePort", "LoadBalancer"]),
                            "port": i("Service port", minimum=1, maximum=65535),
                            "annotations": free("Service annotations")}, "The API's Service"),
            "persistence": obj({"enabled": b("Keep SQLite on a PersistentVolumeClaim"),
                                "size": QUANTITY, "storageClass": s("StorageClass; empty: the default"),
                                "accessModes": arr("PVC access modes", s("access mode", enum=[
                                    "ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"]), minItems=1),
                                "existingClaim": s("Use this PVC instead of creating one")},
                               "SQLite's volume"),
            "images": arr("OpenSandbox image.uri patterns to agent profiles, first match wins",
                          obj({"image": s("An image URI or a prefix ending in *", minLength=1),
                               "profile": s("Agent profile", pattern=r"^[a-z0-9_-]{1,32}$")},
                              required=["image", "profile"]), minItems=1),
            "scheduling": obj({"overcommit": obj({
                                   "cpu": n("CPU overcommit ratio", minimum=1),
                                   "memory": n("Memory overcommit ratio", minimum=1),
                                   "pids": n("Process overcommit ratio", minimum=1)}, "Overcommit"),
                               "bestOfK": i("Nodes sampled per decision (0: all)", minimum=0),
                               "retries": i("Other nodes tried after a failed create", minimum=0)},
                              "Scheduling knobs"),
            "nodes": obj({"heartbeatInterval": DURATION,
                          "misses": i("Missed heartbeats before NotReady", minimum=1),
                          "lostAfter": DURATION}, "Node heartbeats"),
            "extraConfig": free("Extra keys merged into controller.yaml"),
            "resources": resources("The controller's resources"),
            "podAnnotations": free("Pod annotations"), "podLabels": free("Pod labels"),
            "nodeSelector": free("Node selector"), "tolerations": arr("Tolerations", {"type": "object"}),
            "affinity": free("Affinity"), "priorityClassName": s("PriorityClass"),
            "podDisruptionBudget": obj({"enabled": b("Render a PDB (only with replicas > 1)"),
                                        "maxUnavailable": {"type": ["integer", "string"],
                                                           "description": "Pods down at once"}}, "The PDB"),
            "podSecurityContext": free("The pod's securityContext"),
            "securityContext": free("The container's securityContext"),
        }, "moat-controller", ["image", "replicas", "store"]),
        "etcd": obj({
            "enabled": b("Bundle a 3-member etcd StatefulSet"),
            "externalEndpoints": arr("Client URLs of an external etcd",
                                     s("etcd client URL", pattern=r"^https?://")),
            "image": image("The etcd image"),
            "replicas": i("Members (odd)", minimum=1),
            "persistence": obj({"size": QUANTITY, "storageClass": s("StorageClass")}, "Members' volumes"),
            "resources": resources("etcd's resources"),
            "nodeSelector": free("Node selector"), "tolerations": arr("Tolerations", {"type": "object"}),
        }, "etcd for controller.store=etcd"),
        "agent": obj({
            "image": image("The agent's image"),
            "port": i("Node API port", minimum=1, maximum=65535),
            "joinController": b("Join the controller"),
            "labels": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "Labels the agent reports to the controller"},
            "taints": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "Taints the agent reports to the controller"},
            "architectures": arr("kubernetes.io/arch values to run on",
                                 s("architecture", enum=["amd64", "arm64"]), minItems=1, uniqueItems=True),
            "nodeSelector": free("Node selector"), "tolerations": arr("Tolerations", {"type": "object"}),
            "affinity": free("Extra affinity (beside the architecture's node affinity)"),
            "priorityClassName": s("PriorityClass"),
            "profiles": arr("Sandbox profiles", PROFILE, minItems=1),
            "policies": {"type": "object", "description": "Policy files by name (docs/policy.md)",
                         "propertyNames": {"pattern": r"^[a-z0-9_-]{1,32}$"},
                         "additionalProperties": {"type": "object"}},
            "pool": obj({"refillConcurrency": i("Warm sandboxes made at once", minimum=1, maximum=16)},
                        "Pool settings for all profiles"),
            "heartbeat": obj({"interval": DURATION, "misses": i("Misses before compromised", minimum=1, maximum=100)},
                             "Probe heartbeats"),
            "recycle": obj({"perSecond": n("Recycles per second", minimum=0.01, maximum=10000)}, "Recycling"),
            "api": obj({"maxRequestBytes": SIZE, "defaultTtl": DURATION, "maxTtl": DURATION}, "The node API"),
            "stateHostPath": s("Host directory for the agent's state", pattern=r"^/"),
            "rootfsHostPath": s("Host directory of root filesystems ('' for none)", pattern=r"^(/.*)?$"),
            "cgroupHostPath": s("The host's cgroup mount", pattern=r"^/"),
            "updateStrategy": obj({"type": s("RollingUpdate or OnDelete", enum=["RollingUpdate", "OnDelete"]),
                                   "maxUnavailable": {"type": ["integer", "string"],
                                                "description": "Nodes whose agent is replaced at once"}}, "Rollout"),
            "terminationGracePeriodSeconds": i("Time to stop", minimum=1),
            "hostPID": b("Share the host's pid namespace, so that sandboxes outlive the agent's pod"),
            "restartGrace": dict(DURATION, description="How long sandboxes wait for the next agent (0s: never)"),
            "resources": resources("The agent's resources"),
            "podAnnotations": free("Pod annotations"), "podLabels": free("Pod labels"),
        }, "moat-agent DaemonSet", ["image", "profiles"]),
        "secrets": obj({"existingSecret": s("A Secret with api-keys, join-token, agent-token")},
                       "Keys and tokens"),
        "networkPolicy": obj({"enabled": b("Render NetworkPolicies"),
                              "apiClients": arr("NetworkPolicyPeers allowed to call the API", {"type": "object"}),
                              "prometheus": arr("NetworkPolicyPeers allowed to scrape", {"type": "object"})},
                             "NetworkPolicies"),
        "serviceAccount": obj({"create": b("Create ServiceAccounts (no RBAC is bound)"),
                               "annotations": free("Annotations")}, "ServiceAccounts"),
        "metrics": obj({
            "serviceMonitor": obj({"enabled": b("Render ServiceMonitors"), "interval": DURATION,
                                   "scrapeTimeout": DURATION, "labels": free("Labels")}, "ServiceMonitors"),
            "prometheusRule": obj({"enabled": b("Render the PrometheusRule"), "labels": free("Labels"),
                                   "runbookUrlBase": s("Prefix replacing docs/runbooks/ in runbook_url")},
                                  "PrometheusRule"),
        }, "prometheus-operator objects"),
        "dashboards": obj({"enabled": b("Render dashboard ConfigMaps"),
                           "namespace": s("Namespace of the ConfigMaps"),
                           "labels": free("Labels (grafana_dashboard: \"1\" for the sidecar)"),
                           "annotations": free("Annotations (e.g. grafana_folder)")}, "Grafana dashboards"),
        "tests": obj({"image": image("The helm test's image (sh and curl)"),
                      "sandboxImage": s("image.uri the test sandbox asks for")}, "helm test"),
    }),
}


def uncovered(values, schema, where=""):
    """Paths in values.yaml that the schema does not describe."""
    out = []
    if not isinstance(values, dict):
        return out
    props = schema.get("properties")
    for key, value in values.items():
        path = f"{where}.{key}" if where else key
        if props is None:
            if schema.get("type") != "object" or schema.get("additionalProperties") is False:
                out.append(path)
            continue
        if key not in props:
            out.append(path)
        elif "description" not in props[key] and not props[key].get("properties"):
            out.append(path + " (no description)")
        else:
            out += uncovered(value, props[key], path)
    return out


def main():
    text = json.dumps(SCHEMA, indent=2) + "\n"
    import yaml
    values = yaml.safe_load((OUT.parent / "values.yaml").read_text())
    missing = uncovered(values, SCHEMA)
    if missing:
        print("values.schema.json does not cover: " + ", ".join(missing), file=sys.stderr)
        return 1
    if "--check" in sys.argv[1:]:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run deploy/values-schema.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
