#!/usr/bin/env python3
"""Refuses an #include that points up: each folder is a layer and may use only the layers below.

The layers and their arrows are declared here, once; docs/architecture.md draws the same map.
A folder may include its own headers and those of every layer it depends on, directly or
through another. Tests (*_test.cc) may also include the testing/ folders' fakes, and a main.cc
(a binary's entry point, which only wires) every layer in its folder's subtree. Run by ctest
("layering"); exits 1 with one line per upward arrow.
"""
import os
import re
import sys

# folder -> the layers it builds on (its direct arrows).
LAYERS = {
    "util": [],
    "util/http": ["util"],
    "sandbox/values": ["util"],
    "sandbox/cgroup": ["util"],
    "sandbox/seccomp": ["util"],
    "sandbox/output": ["util"],
    "sandbox/netns": ["util"],
    "sandbox/egress": ["sandbox/values", "sandbox/netns", "sandbox/output"],
    "sandbox/policy": ["sandbox/values"],
    "sandbox": ["sandbox/policy", "sandbox/egress", "sandbox/seccomp", "sandbox/cgroup"],
    "sandbox/init": ["sandbox"],
    "sandbox/cli": ["sandbox"],
    "node-agent/config": ["sandbox/policy"],
    "node-agent/backend": ["sandbox", "node-agent/config"],
    "node-agent/pool": ["node-agent/backend", "node-agent/config"],
    "node-agent/probe": ["sandbox", "node-agent/backend"],
    "node-agent": ["node-agent/pool", "node-agent/probe", "util/http"],
    "node-agent/api": ["node-agent", "util/http"],
    "controller/store": ["util"],
    "controller/scheduler": ["util"],
    "controller/tenants": ["controller/store", "controller/scheduler"],
    "controller/precheck": ["controller/store"],
    "controller": ["controller/store", "controller/scheduler", "controller/tenants",
                   "controller/precheck", "sandbox/values", "util/http"],
}
TESTING = {"util/testing", "sandbox/testing", "node-agent/testing", "controller/testing"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def closure(folder, memo={}):
    if folder not in memo:
        below = set()
        for dep in LAYERS[folder]:
            below |= {dep} | closure(dep)
        memo[folder] = below
    return memo[folder]


def layer_of(path):
    """The deepest declared layer that holds `path` (a repository-relative file name)."""
    folder = os.path.dirname(path)
    while folder:
        if folder in LAYERS or folder in TESTING:
            return folder
        folder = os.path.dirname(folder)
    return None


def main(root):
    problems = []
    for folder in sorted(LAYERS):
        base = os.path.join(root, folder)
        for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            if not name.endswith((".h", ".cc")):
                continue
            path = f"{folder}/{name}"
            allowed = {folder} | closure(folder)
            if name == "main.cc":  # a binary's entry point wires every layer of its folder
                allowed |= {f for f in LAYERS if f.startswith(folder + "/")}
                for f in list(allowed):
                    allowed |= closure(f)
            if name.endswith("_test.cc"):
                allowed |= TESTING
            with open(os.path.join(root, path), encoding="utf-8") as f:
                text = f.read()
            for header in INCLUDE.findall(text):
                target = layer_of(header)
                if target is None or not os.path.exists(os.path.join(root, header)):
                    continue  # a generated file or a system-style include
                if target not in allowed:
                    problems.append(f"{path}: includes {header}, but {folder}/ may use only "
                                    f"{', '.join(sorted(allowed))} (scripts/check_layers.py)")
    for p in problems:
        print(p)
    if not problems:
        print(f"layering: {len(LAYERS)} layers, no upward arrow")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else
                  os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
