#!/usr/bin/env python3
"""Structural checks of deploy/: every role has a manifest whose pod runs
`moerl node --role ROLE --join ...`, kustomize references resolve, Spot pods drain inside
the Spot notice, GPU pods tolerate the GPU taint, and every node config passes
`moerl config check` (so a config key typo fails here, not in a cluster)."""
import os
import pathlib
import subprocess
import sys
import tempfile

import yaml

ROLES = ["coordinator", "rollout", "reward", "env", "buffer", "trainer", "weights"]
SPOT_NOTICE_S = 120


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def check_kustomization(dirpath):
    k = load_all(dirpath / "kustomization.yaml")[0]
    for res in k.get("resources", []):
        if not (dirpath / res).exists():
            fail(f"{dirpath}/kustomization.yaml: resource {res} does not exist")
    for gen in k.get("configMapGenerator", []):
        for f in gen.get("files", []):
            if not (dirpath / f).exists():
                fail(f"{dirpath}/kustomization.yaml: configMap file {f} does not exist")
    for p in k.get("patches", []):
        if not (dirpath / p["path"]).exists():
            fail(f"{dirpath}/kustomization.yaml: patch {p['path']} does not exist")
        load_all(dirpath / p["path"])
    return k


def main(moerl, deploy):
    deploy = pathlib.Path(deploy)
    base = deploy / "base"
    check_kustomization(base)
    workloads = {}
    for res in check_kustomization(base)["resources"]:
        for doc in load_all(base / res):
            if doc["kind"] in ("Deployment", "StatefulSet"):
                role = doc["metadata"]["labels"]["moerl.io/role"]
                workloads[role] = doc
    missing = set(ROLES) - set(workloads)
    if missing:
        fail(f"no manifest for roles {sorted(missing)}")
    for role, doc in workloads.items():
        spec = doc["spec"]["template"]["spec"]
        args = spec["containers"][0]["args"]
        if args[:3] != ["node", "--role", role] or "--join" not in args:
            fail(f"{role}: container args {args} do not start a `{role}` node that joins")
        container = spec["containers"][0]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            if probe not in container:
                fail(f"{role}: no {probe}")
            if role != "coordinator":
                cmd = container[probe].get("exec", {}).get("command", [])
                if cmd[1:4] != ["probe", "--file", "/tmp/moerl-health.json"]:
                    fail(f"{role}: {probe} {cmd} does not run `moerl probe` on the health file")
        sel = spec.get("nodeSelector", {})
        grace = spec["terminationGracePeriodSeconds"]
        if sel.get("moerl.io/capacity") == "spot" and grace >= SPOT_NOTICE_S:
            fail(f"{role}: grace {grace}s does not fit inside the {SPOT_NOTICE_S}s Spot notice")
        if role in ("coordinator", "trainer", "buffer") and sel.get("moerl.io/capacity") != "on-demand":
            fail(f"{role}: must run on on-demand capacity (DESIGN.md section 2)")
        limits = spec["containers"][0].get("resources", {}).get("limits", {})
        if "nvidia.com/gpu" in limits:
            tol = [t["key"] for t in spec.get("tolerations", [])]
            if "nvidia.com/gpu" not in tol:
                fail(f"{role}: requests GPUs but does not tolerate the nvidia.com/gpu taint")
    for overlay in sorted((deploy / "overlays").iterdir()):
        check_kustomization(overlay)
    configs = [base / "moerl.yaml"] + sorted((deploy / "overlays").glob("*/moerl.yaml"))
    for cfg in configs:  # an overlay's ConfigMap replaces the base's
        if load_all(cfg)[0]["node"].get("health_file") != "/tmp/moerl-health.json":
            fail(f"{cfg}: node.health_file must be the file the probes read")
    # Secret files (console.*_token_file) exist only in a pod, where a Secret is mounted: the
    # check reads a stand-in file instead, so everything else in the config is still checked.
    stand_in = tempfile.NamedTemporaryFile("w", prefix="moerl-secret-", delete=False)
    stand_in.write("stand-in-secret\n")
    stand_in.close()
    for cfg in configs:
        secrets = [f"{section}.{key}={stand_in.name}"
                   for section, keys in load_all(cfg)[0].items() if isinstance(keys, dict)
                   for key in keys if key.endswith("token_file")]
        sets = [x for kv in secrets for x in ("--set", kv)]
        r = subprocess.run([moerl, "config", "check", str(cfg), *sets], capture_output=True,
                           text=True)
        if r.returncode != 0:
            fail(f"{cfg}: moerl config check exited {r.returncode}: {r.stderr.strip()}")
    os.unlink(stand_in.name)
    cluster = load_all(deploy / "eks" / "cluster.yaml")[0]
    spot = [g for g in cluster["managedNodeGroups"] if g.get("spot")]
    if not spot or not all(g.get("efaEnabled") for g in spot):
        fail("eks/cluster.yaml: the Spot rollout group must exist and have EFA enabled")
    print(f"deploy checks passed: {len(workloads)} roles, {len(configs)} configs")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
