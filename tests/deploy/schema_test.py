#!/usr/bin/env python3
"""Every overlay of deploy/ renders (`kubectl kustomize`) to resources that validate against
the Kubernetes schemas of the cluster version in deploy/eks/cluster.yaml, strictly (an unknown
field fails), with kubernetes-validate (PyPI; scripts/install-deps.sh installs it). CRDs the
schemas do not hold (Karpenter, KEDA) are checked for the fields moerl relies on. Then what an
EKS user needs from the production overlay (efa-spot): EFA requests = limits at p5en's 16
interfaces, /dev/shm in memory, IPC_LOCK, hugepages mounted, the TLS and console-token Secrets
mounted where the config reads them (no token in the ConfigMap), priorities, disruption budgets and the trainer group's placement.

Without kubectl (not a Debian package) the rendering is skipped and the test exits 77."""
import pathlib
import shutil
import subprocess
import sys

import yaml

DEPLOY = pathlib.Path(sys.argv[1])
CRD_KINDS = {"NodePool", "EC2NodeClass", "ScaledObject", "ClusterConfig"}


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def render(overlay):
    r = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        fail(f"kubectl kustomize {overlay}: {r.stderr.strip()}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def validate(docs, where, version):
    import kubernetes_validate as kv
    for d in docs:
        name = f"{where}: {d.get('kind')}/{d.get('metadata', {}).get('name')}"
        if d.get("kind") in CRD_KINDS:
            continue
        try:
            kv.validate(d, version, strict=True)
        except kv.ValidationError as e:
            fail(f"{name}: {e.message} at {'.'.join(str(p) for p in e.path)}")


def workloads(docs):
    return {d["metadata"]["labels"]["moerl.io/role"]: d for d in docs
            if d["kind"] in ("Deployment", "StatefulSet")}


def check_production(docs):
    w = workloads(docs)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    cfg = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["moerl.yaml"])
    for role in ("rollout", "trainer"):
        spec = w[role]["spec"]["template"]["spec"]
        c = spec["containers"][0]
        res = c["resources"]
        if res.get("requests") != res.get("limits"):
            fail(f"{role}: requests {res.get('requests')} != limits {res.get('limits')}")
        if res["limits"].get("vpc.amazonaws.com/efa") != 16:
            fail(f"{role}: vpc.amazonaws.com/efa {res['limits'].get('vpc.amazonaws.com/efa')}, "
                 "p5en.48xlarge has 16")
        vols = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        if vols.get(mounts.get("/dev/shm"), {}).get("emptyDir", {}).get("medium") != "Memory":
            fail(f"{role}: /dev/shm is not a memory-backed emptyDir")
        if vols.get(mounts.get("/dev/hugepages"), {}).get("emptyDir", {}).get("medium") != \
                "HugePages":
            fail(f"{role}: no HugePages volume at /dev/hugepages")
        if "IPC_LOCK" not in c.get("securityContext", {}).get("capabilities", {}).get("add", []):
            fail(f"{role}: no IPC_LOCK capability (registered memory)")
    for key in ("token", "viewer_token", "operator_token"):
        if key in cfg.get("console", {}):
            fail(f"console.{key} is in the ConfigMap: tokens belong in the Secret moerl-console")
        if f"{key}_file" not in cfg.get("console", {}):
            fail(f"console.{key}_file is not set: the token would be the built-in default")
    token_dir = str(pathlib.PurePosixPath(cfg["console"]["operator_token_file"]).parent)
    tls_dir = str(pathlib.PurePosixPath(cfg["node"]["tls_certificate"]).parent)
    plane_dir = str(pathlib.PurePosixPath(cfg["node"]["plane_secret_file"]).parent)
    for role, d in w.items():
        spec = d["spec"]["template"]["spec"]
        c = spec["containers"][0]
        vols = {v["name"]: v for v in spec["volumes"]}
        m = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        if vols.get(m.get(tls_dir), {}).get("secret", {}).get("secretName") != "moerl-tls":
            fail(f"{role}: the TLS Secret moerl-tls is not mounted at {tls_dir}")
        if vols.get(m.get(token_dir), {}).get("secret", {}).get("secretName") != "moerl-console":
            fail(f"{role}: the token Secret moerl-console is not mounted at {token_dir}")
        if vols.get(m.get(plane_dir), {}).get("secret", {}).get("secretName") != "moerl-plane":
            fail(f"{role}: the plane Secret moerl-plane is not mounted at {plane_dir}")
        want = "moerl-critical" if role in ("coordinator", "trainer", "buffer", "weights") \
            else "moerl-workers"
        if spec.get("priorityClassName") != want:
            fail(f"{role}: priorityClassName {spec.get('priorityClassName')}, want {want}")
    for pc in ("moerl-critical", "moerl-workers"):
        if ("PriorityClass", pc) not in kinds:
            fail(f"no PriorityClass {pc}")
    values = {d["metadata"]["name"]: d["value"] for d in docs if d["kind"] == "PriorityClass"}
    if not values["moerl-critical"] > values["moerl-workers"]:
        fail(f"priorities {values}: the trainer and coordinator must outrank the workers")
    pdbs = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PodDisruptionBudget"}
    if pdbs.get("moerl-trainer", {}).get("maxUnavailable") != 0:
        fail(f"the trainer group's PodDisruptionBudget must allow no eviction: {pdbs}")
    if "maxUnavailable" not in pdbs.get("moerl-rollout", {}):
        fail(f"no bounded PodDisruptionBudget for rollouts: {pdbs}")
    t = w["trainer"]["spec"]
    if t.get("podManagementPolicy") != "Parallel":
        fail("the trainer group's members must start together (podManagementPolicy Parallel)")
    zone = t["template"]["spec"].get("affinity", {}).get("podAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", [])
    if not any(z["topologyKey"] == "topology.kubernetes.io/zone" for z in zone):
        fail("the trainer group is not held to one zone")


def check_groups(docs, where):
    """The groups as pods: a trainer group is its StatefulSet's members (replicas =
    trainer.group_size; started together, since a member is not Ready before its group formed),
    and a rollout group of the Deployment's pods has exactly rollout.group_size of them (they
    share one group name: a pod beyond the group's size would never join it)."""
    w = {d["metadata"]["labels"]["moerl.io/role"]: d for d in docs
         if d["kind"] in ("Deployment", "StatefulSet")}
    cfg = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["moerl.yaml"])
    trainer_size = cfg.get("trainer", {}).get("group_size", 1)
    rollout_size = cfg.get("rollout", {}).get("group_size", 1)
    t = w["trainer"]
    if t["kind"] != "StatefulSet" or t["spec"].get("replicas", 1) != trainer_size:
        fail(f"{where}: the trainer {t['kind']} has {t['spec'].get('replicas', 1)} replicas, "
             f"trainer.group_size is {trainer_size}")
    if trainer_size > 1 and t["spec"].get("podManagementPolicy") != "Parallel":
        fail(f"{where}: a trainer group of {trainer_size} must start its members together "
             "(podManagementPolicy Parallel)")
    r = w["rollout"]["spec"].get("replicas", 1)
    if rollout_size > 1 and r != rollout_size:
        fail(f"{where}: {r} rollout pods for one rollout group of rollout.group_size {rollout_size}")
    # External workers run one process per node (python/WORKERS.md). A rollout group with them
    # is not built (`moerl up` and the rollout node refuse it); a Python trainer group is, but
    # has run only under `moerl up` on one host (its example's expert plane on shared memory,
    # which pods do not share), so the manifests keep both at one process per node.
    for role, size in (("trainer", trainer_size), ("rollout", rollout_size)):
        if cfg.get(role, {}).get("worker") and size != 1:
            why = ("a Python trainer group has not run as pods yet"
                   if role == "trainer" else "rollout groups of external workers are not built")
            fail(f"{where}: {role}.worker with {role}.group_size {size}: {why}; "
                 f"{role}.group_size must be 1 in the manifests")
    return trainer_size, rollout_size


def check_python_workers(docs, where, required):
    """An overlay whose config names python: workers runs every pod on the image that has
    Python, torch and the moerl package (deploy/image/Dockerfile.torch, scripts/pods.sh
    --torch tags it moerl-torch); the native node image has no Python and every worker start
    would fail."""
    cfg = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["moerl.yaml"])
    python = [f"{role}.worker" for role in ("rollout", "reward", "trainer", "env")
              if str(cfg.get(role, {}).get("worker", "")).startswith("python:")]
    if not python:
        if required:
            fail(f"{where}: no python: worker in its config")
        return
    for d in docs:
        if d["kind"] not in ("Deployment", "StatefulSet"):
            continue
        image = d["spec"]["template"]["spec"]["containers"][0]["image"]
        if image.split(":")[0] != "moerl-torch":
            fail(f"{where}: {d['metadata']['name']} runs {image}; {', '.join(python)} need the "
                 "torch image moerl-torch")


def check_karpenter(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    pool = next(d for d in docs if d["kind"] == "NodePool")
    req = {r["key"]: r["values"] for r in pool["spec"]["template"]["spec"]["requirements"]}
    if req.get("karpenter.sh/capacity-type") != ["spot"]:
        fail(f"{path}: the rollout NodePool must be Spot: {req}")
    labels = pool["spec"]["template"]["metadata"]["labels"]
    if labels.get("moerl.io/capacity") != "spot":
        fail(f"{path}: rollout pods select moerl.io/capacity=spot; the NodePool labels {labels}")
    ref = pool["spec"]["template"]["spec"]["nodeClassRef"]["name"]
    if not any(d["kind"] == "EC2NodeClass" and d["metadata"]["name"] == ref for d in docs):
        fail(f"{path}: NodePool refers to EC2NodeClass {ref}, which is not there")
    if "aws-node-termination-handler" not in path.read_text():
        fail(f"{path}: must say not to run aws-node-termination-handler beside Karpenter")


def main():
    try:
        import kubernetes_validate  # noqa: F401
    except ImportError:
        fail("kubernetes-validate is missing: run scripts/install-deps.sh")
    version = yaml.safe_load((DEPLOY / "eks" / "cluster.yaml").read_text())["metadata"]["version"]
    version = f"{version}.0"
    check_karpenter(DEPLOY / "eks" / "karpenter.yaml")
    if shutil.which("kubectl") is None:
        print("SKIP: kubectl is missing (not in Debian): overlays not rendered", flush=True)
        sys.exit(77)
    for overlay in sorted((DEPLOY / "overlays").iterdir()):
        docs = render(overlay)
        validate(docs, overlay.name, version)
        if overlay.name in ("efa-spot", "eks-gpu"):  # eks-gpu: efa-spot on the GPU image
            check_production(docs)
        groups = check_groups(docs, overlay.name)
        if overlay.name == "local-pods" and groups != (2, 2):
            fail(f"local-pods runs a trainer group of {groups[0]} and a rollout group of "
                 f"{groups[1]} pods, want 2 and 2 (scripts/pods.sh kills a member of each)")
        check_python_workers(docs, overlay.name, required=overlay.name == "local-pods-torch")
        print(f"{overlay.name}: {len(docs)} resources valid against Kubernetes {version}; "
              f"trainer group of {groups[0]}, rollout group of {groups[1]} pod(s)", flush=True)
    validate(render(DEPLOY / "autoscale"), "autoscale", version)
    print("deploy schema checks passed", flush=True)


if __name__ == "__main__":
    main()
