#!/usr/bin/env python3
"""No daemon of the chart reads a key or token file straight from a Secret volume.

The kubelet makes every file of a Secret volume a symlink (KEY -> ..data/KEY), and moat-agent
and moat-controller refuse key and token files that are symlinks. So every `*_file` value in the
rendered configurations (the ConfigMaps' *.yaml) must lie outside every Secret volume's mount
(the chart copies them to a memory volume first).
usage: deploy/check-secret-files.py RENDERED.yaml...   (exit 1 naming each such file)
"""
import sys

import yaml


def config_files(docs):
    """(ConfigMap/key, path) of every *_file value in the ConfigMaps' YAML files."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and key.endswith("_file"):
                    found.append((where, value))
                walk(value, where)
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    for d in docs:
        if d.get("kind") == "ConfigMap":
            for key, text in (d.get("data") or {}).items():
                if key.endswith(".yaml"):
                    walk(yaml.safe_load(text), f'{d["metadata"]["name"]}/{key}')
    return found


def check(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    files = config_files(docs)
    problems, mounts = [], 0
    for d in docs:
        spec = ((d.get("spec") or {}).get("template") or {}).get("spec")
        if d.get("kind") not in ("Deployment", "DaemonSet", "StatefulSet") or not spec:
            continue
        secret_volumes = {v["name"] for v in spec.get("volumes", []) if "secret" in v}
        for c in spec.get("containers", []):
            for m in c.get("volumeMounts", []):
                if m["name"] not in secret_volumes:
                    continue
                mounts += 1
                prefix = m["mountPath"].rstrip("/") + "/"
                for where, file in files:
                    if file == m["mountPath"] or file.startswith(prefix):
                        problems.append(
                            f'{where}: {file} is in Secret volume "{m["name"]}" of {d["kind"]} '
                            f'{d["metadata"]["name"]}, where it is a symlink: copy it to a '
                            'memory volume first')
    return problems, f"{len(files)} files, {mounts} Secret mounts"


failed = False
for path in sys.argv[1:]:
    problems, summary = check(path)
    for p in problems:
        print(f"{path}: {p}")
    if problems:
        failed = True
    else:
        print(f"ok   {path}: {summary}, none read through a Secret volume")
sys.exit(1 if failed else 0)
