#!/usr/bin/env python3
"""deploy/overlays/local-pods renders to what the base gives every overlay, except the local
changes its kustomization.yaml lists (and nothing else), and deploy/podman/controllers.py
turns that rendering into the pods Kubernetes' controllers would create. The same for
deploy/overlays/local-pods-torch against local-pods: the torch image, one trainer member and
the listed config keys (the Python workers' job), nothing else.

Needs `kubectl` (for `kubectl kustomize`); exits 77 (CTest: skipped) where it is missing.
Starts no container: scripts/pods.sh plays these files (a long rehearsal, not CI)."""
import copy
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import yaml

DEPLOY = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "deploy")
CONTROLLERS = DEPLOY / "podman" / "controllers.py"
# overlays/dev's changes (CPU only, no capacity selectors), which local-pods builds on.
CPU_ONLY = {"moerl-rollout", "moerl-trainer"}
# local-pods' own changes.
# The groups as pods: a 2-member trainer group (its StatefulSet's members, started together)
# and one 2-member rollout group (the rollout Deployment's pods).
LOCAL_REPLICAS = {"moerl-rollout": 2, "moerl-trainer": 2}
LOCAL_SPEC = {"moerl-trainer": {"podManagementPolicy": "Parallel"}}
STORE_VOLUME = {"name": "store", "persistentVolumeClaim": {"claimName": "moerl-store"}}
STORE_MOUNT = {"name": "store", "mountPath": "/var/lib/moerl/store"}
BLAS_ENV = {"name": "OPENBLAS_NUM_THREADS", "value": "1"}
# The cluster's Secrets (components/cluster-secrets, as efa-spot mounts them; pods.sh makes
# them per run): TLS on the control plane, the console tokens from files.
SECRET_VOLUMES = [{"name": "tls", "secret": {"defaultMode": 0o400, "secretName": "moerl-tls"}},
                  {"name": "console-tokens",
                   "secret": {"defaultMode": 0o400, "secretName": "moerl-console"}}]
SECRET_MOUNTS = [{"mountPath": "/etc/moerl-tls", "name": "tls", "readOnly": True},
                 {"mountPath": "/etc/moerl-console", "name": "console-tokens", "readOnly": True}]
# Config keys local-pods sets differently from overlays/dev's moerl.yaml (dev takes the same
# TLS files from the Secret moerl-tls, deploy/components/cluster-tls; local-pods also says
# node.tls outright).
LOCAL_CONFIG_KEYS = {"log.level", "node.request_timeout_ms", "store.url", "actors.iterations",
                     "grpo.iterations", "node.tls", "console.address", "console.token_file",
                     "console.viewer_token_file", "console.operator_token_file",
                     "trainer.group_size", "rollout.group_size", "job.trainer_ep_ranks",
                     "job.rollout_ep_ranks"}
# What the groups' keys must be (= the replicas above, one rank per member pod).
GROUP_CONFIG = {"trainer.group_size": 2, "rollout.group_size": 2, "job.trainer_ep_ranks": 1,
                "job.rollout_ep_ranks": 1}
# local-pods-torch's changes to local-pods (its kustomization.yaml and moerl.yaml list why).
TORCH_IMAGE = "moerl-torch:latest"
TORCH_REPLICAS = {"moerl-trainer": 1}
TORCH_CONFIG = {"rollout.worker": "python:moerl.examples.torch_moe.rollout:main",
                "reward.worker": "python:moerl.examples.torch_moe.reward:score",
                "trainer.worker": "python:moerl.examples.torch_moe.trainer:main",
                "trainer.group_size": 1, "rollout.group_size": 1, "actors.rollout_workers": 1,
                "actors.lease_batch": 4, "actors.trainer_batch_groups": 8,
                "worker.start_timeout_ms": 120000, "actors.iterations": 300,
                "grpo.iterations": 300}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def render(overlay):
    r = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"kubectl kustomize {overlay}: {r.stderr.strip()}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def by_name(docs, kinds):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] in kinds}


def flat(tree, prefix=""):
    out = {}
    for k, v in (tree or {}).items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_of(docs):
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    return flat(yaml.safe_load(cm["data"]["moerl.yaml"])), cm["metadata"]["name"]


def expected_local(base_workload, base_cm, local_cm):
    """The base workload with exactly the listed dev and local-pods changes applied."""
    w = copy.deepcopy(base_workload)
    name = w["metadata"]["name"]
    spec = w["spec"]["template"]["spec"]
    c = spec["containers"][0]
    if name in CPU_ONLY:
        c["resources"] = {"requests": {"cpu": "2", "memory": "8Gi"}}
        spec.pop("tolerations", None)
    spec.pop("nodeSelector", None)
    for v in spec["volumes"]:
        if v.get("configMap", {}).get("name") == base_cm:
            v["configMap"]["name"] = local_cm
    spec["volumes"] = SECRET_VOLUMES + spec["volumes"] + [STORE_VOLUME]
    c["volumeMounts"] = SECRET_MOUNTS + c["volumeMounts"] + [STORE_MOUNT]
    c["env"].append(BLAS_ENV)
    if name in LOCAL_REPLICAS:
        w["spec"]["replicas"] = LOCAL_REPLICAS[name]
    w["spec"].update(LOCAL_SPEC.get(name, {}))
    return w


def main():
    if shutil.which("kubectl") is None:
        print("SKIP: kubectl is not installed (kubectl kustomize renders the overlays)")
        sys.exit(77)
    base = render(DEPLOY / "base")
    dev = render(DEPLOY / "overlays" / "dev")
    local = render(DEPLOY / "overlays" / "local-pods")

    kinds = ("Deployment", "StatefulSet")
    base_w, local_w = by_name(base, kinds), by_name(local, kinds)
    if set(base_w) != set(local_w):
        fail(f"workloads differ: base {sorted(base_w)}, local-pods {sorted(local_w)}")
    base_cfg, base_cm = config_of(base)
    local_cfg, local_cm = config_of(local)
    for name, w in base_w.items():
        want = expected_local(w, base_cm, local_cm)
        if local_w[name] != want:
            fail(f"{name}: local-pods differs from the base beyond the listed changes:\n"
                 f"want {json.dumps(want, sort_keys=True)}\ngot  "
                 f"{json.dumps(local_w[name], sort_keys=True)}")

    dev_cfg, _ = config_of(dev)
    changed = {k for k in set(dev_cfg) | set(local_cfg) if dev_cfg.get(k) != local_cfg.get(k)}
    if changed != LOCAL_CONFIG_KEYS:
        fail(f"local-pods' moerl.yaml changes {sorted(changed)} against overlays/dev's; "
             f"listed: {sorted(LOCAL_CONFIG_KEYS)}")
    for key, want in GROUP_CONFIG.items():
        if local_cfg.get(key) != want:
            fail(f"local-pods' {key} is {local_cfg.get(key)}, want {want} (its groups' pods)")
    if local_cfg["fabric.provider"] != "tcp;ofi_rxm" or not local_cfg["fabric.require_provider"]:
        fail("local-pods must require the tcp fabric (no EFA or shared memory between pods)")
    if local_cfg["node.tls"] is not True:
        fail("local-pods must run TLS on the control plane, as production does")
    for key in ("token", "viewer_token", "operator_token"):
        if f"console.{key}" in local_cfg:
            fail(f"console.{key} is in the ConfigMap: tokens belong in the Secret moerl-console")

    others = lambda docs: sorted((d["kind"], d["metadata"]["name"]) for d in docs
                                 if d["kind"] not in kinds + ("ConfigMap",))
    extra = set(others(local)) - set(others(base))
    if extra != {("PersistentVolumeClaim", "moerl-store")}:
        fail(f"local-pods adds {sorted(extra)}; listed: the moerl-store claim")

    check_controllers(local)
    print(f"local-pods checks passed: {len(local_w)} workloads, config changes "
          f"{sorted(changed)}")
    check_torch(local, render(DEPLOY / "overlays" / "local-pods-torch"))


def check_torch(local, torch):
    kinds = ("Deployment", "StatefulSet")
    local_w, torch_w = by_name(local, kinds), by_name(torch, kinds)
    if set(local_w) != set(torch_w):
        fail(f"workloads differ: local-pods {sorted(local_w)}, local-pods-torch {sorted(torch_w)}")
    local_cfg, local_cm = config_of(local)
    torch_cfg, torch_cm = config_of(torch)
    for name, w in local_w.items():
        want = copy.deepcopy(w)
        spec = want["spec"]["template"]["spec"]
        spec["containers"][0]["image"] = TORCH_IMAGE
        for v in spec["volumes"]:
            if v.get("configMap", {}).get("name") == local_cm:
                v["configMap"]["name"] = torch_cm
        if name in TORCH_REPLICAS:
            want["spec"]["replicas"] = TORCH_REPLICAS[name]
        if torch_w[name] != want:
            fail(f"{name}: local-pods-torch differs from local-pods beyond the listed changes:\n"
                 f"want {json.dumps(want, sort_keys=True)}\ngot  "
                 f"{json.dumps(torch_w[name], sort_keys=True)}")
    changed = {k: torch_cfg.get(k) for k in set(local_cfg) | set(torch_cfg)
               if local_cfg.get(k) != torch_cfg.get(k)}
    if changed != TORCH_CONFIG:
        fail(f"local-pods-torch's moerl.yaml changes {json.dumps(changed, sort_keys=True)} "
             f"against local-pods'; listed: {json.dumps(TORCH_CONFIG, sort_keys=True)}")
    others = lambda docs: sorted((d["kind"], d["metadata"]["name"]) for d in docs
                                 if d["kind"] not in kinds + ("ConfigMap",))
    if others(torch) != others(local):
        fail(f"local-pods-torch's other resources {others(torch)} are not local-pods' "
             f"{others(local)}")
    print(f"local-pods-torch checks passed: local-pods with image {TORCH_IMAGE}, replicas "
          f"{TORCH_REPLICAS}, config changes {sorted(changed)}")


def check_controllers(local):
    with tempfile.TemporaryDirectory() as tmp:
        rendered = pathlib.Path(tmp) / "rendered.yaml"
        rendered.write_text(yaml.safe_dump_all(local))
        out = pathlib.Path(tmp) / "out"
        subprocess.run([sys.executable, str(CONTROLLERS), "plan", str(rendered), str(out)],
                       check=True, capture_output=True)
        plan = json.loads((out / "plan.json").read_text())
        pods = {p["pod"]: p for p in plan["pods"]}
        for w in plan["workloads"].values():
            name, n = w["metadata"]["name"], w["spec"]["replicas"]
            mine = [p for p in pods.values() if p["controller"] == name]
            if len(mine) != n:
                fail(f"{name}: {len(mine)} pods for {n} replicas")
            if w["kind"] == "StatefulSet" and {p["pod"] for p in mine} != {
                    f"{name}-{i}" for i in range(n)}:
                fail(f"{name}: StatefulSet pods are not {name}-0..{n - 1}")
            template = copy.deepcopy(w["spec"]["template"]["spec"])
            for c in template["containers"]:
                c.pop("ports", None)  # containerPorts without hostPort publish nothing
            # podman 4.3 writes Secret volumes base64-encoded and rewrites a ConfigMap's volume at
            # every pod's play: each is the named volume pods.sh fills once, mounted read-only.
            template["volumes"] = [
                {"name": v["name"], "persistentVolumeClaim": {
                    "claimName": v["secret"]["secretName"], "readOnly": True}}
                if "secret" in v else
                {"name": v["name"], "persistentVolumeClaim": {
                    "claimName": v["configMap"]["name"], "readOnly": True}}
                if "configMap" in v else v for v in template["volumes"]]
            for p in mine:
                doc = yaml.safe_load((out / "pods" / f"{p['pod']}.yaml").read_text())
                if doc["spec"] != template:
                    fail(f"{p['pod']}: pod spec is not its controller's template")
                if p["grace_s"] != template["terminationGracePeriodSeconds"]:
                    fail(f"{p['pod']}: grace {p['grace_s']} is not the manifest's")
        cm = next(d for d in local if d["kind"] == "ConfigMap")
        if plan["configmaps"] != {cm["metadata"]["name"]: cm["data"]}:
            fail(f"plan.json's ConfigMap files {sorted(plan['configmaps'])} are not "
                 f"{cm['metadata']['name']}'s")
        if plan["secrets"] != ["moerl-console", "moerl-plane", "moerl-tls"]:
            fail(f"plan.json lists the Secrets {plan['secrets']}, "
                 "not moerl-console, moerl-plane and moerl-tls")
        coord = [p for p in pods.values() if p["role"] == "coordinator"]
        if [p["aliases"] for p in coord] != [["moerl-coordinator"]]:
            fail(f"the coordinator pod does not answer to its Service's name: {coord}")
        if plan["pods"][0]["role"] != "coordinator":
            fail("the coordinator's pod is not played first")
        # A Deployment's replacement gets a new name, a StatefulSet's its old one.
        rollout = next(p["pod"] for p in plan["pods"] if p["role"] == "rollout")
        for old, same in ((rollout, False), ("moerl-trainer-1", True)):
            r = subprocess.run([sys.executable, str(CONTROLLERS), "replace", str(out), old],
                               check=True, capture_output=True, text=True)
            if (r.stdout.strip() == old) != same:
                fail(f"replacement of {old} is {r.stdout.strip()}")
        bad = subprocess.run([sys.executable, str(CONTROLLERS), "replace", str(out), "nope"],
                             capture_output=True, text=True)
        if bad.returncode != 2 or "no pod nope" not in bad.stderr:
            fail(f"an unknown pod is not refused by name: {bad.stderr}")


if __name__ == "__main__":
    main()
