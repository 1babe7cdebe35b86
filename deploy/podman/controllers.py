#!/usr/bin/env python3
"""What Kubernetes' controllers would make of the rendered manifests, as files podman plays.

podman 4.3's `kube play` plays Pods, Deployments, ConfigMaps, Secrets and
PersistentVolumeClaims; it skips StatefulSets and Services without a word and has no
controller that recreates a pod. scripts/pods.sh therefore plays the pods the controllers
would create, one file each, from the rendered manifests' own pod templates (spec copied
unchanged: args, env, probes, grace period, volumes, resources; container ports without a
hostPort are left out, see pod_doc):

- a StatefulSet of N replicas makes pods <name>-0 .. <name>-(N-1), and recreates a lost pod
  under the same name;
- a Deployment makes pods <name>-<hash of its template>-<5 random characters>, and replaces a
  lost pod by a new one under a new name (what its ReplicaSet does);
- a headless Service (clusterIP: None) is DNS names for the pods it selects: pods.sh joins
  those pods to the network under the Service's name as an alias (the mapping of the
  coordinator Service that local-pods needs);
- Secrets and PersistentVolumeClaims are played once, before any pod (resources.yaml);
- a ConfigMap volume becomes the podman named volume of the ConfigMap's name (mounted_volume),
  which pods.sh fills once with its files before any pod plays (plan.json's configmaps):
  podman 4.3's kube play --configmap rewrites that volume (os.Create: truncate, then write) at
  every pod's play, so a node starting while the next pod was played read an empty
  moerl.yaml and ran on the defaults (seen with local-pods-torch: the trainer came up with a
  plain control plane, could not join the TLS coordinator and exited 3); a replacement's play
  rewrote it under every running pod too;
- a Secret volume becomes the podman named volume of the Secret's name (secret_volume):
  podman 4.3 writes a Secret's values into its volume still base64-encoded (a PEM file or a
  token would arrive as its base64 text), so pods.sh fills that volume with the decoded files
  (mode 0400, as the manifests' defaultMode) and every pod mounts it read-only, as the kubelet
  mounts a Secret.

  controllers.py plan RENDERED.yaml OUT      resources.yaml, configmaps.yaml (for `down`), pods/,
                                             plan.json
  controllers.py replace OUT POD             the controller's replacement of POD (prints it)

plan.json lists every pod with its controller, role, grace period and network aliases, the
Secrets the pods mount, and the files of every ConfigMap they mount.
"""
import copy
import hashlib
import json
import pathlib
import random
import string
import sys

import yaml

WORKLOADS = ("Deployment", "StatefulSet")
PLAYED_ONCE = ("Secret", "PersistentVolumeClaim")
# Kinds podman has no use for on one machine: names are not namespaced there, and Services
# become network aliases (above).
DROPPED = ("Namespace", "Service")


def fail(msg):
    print(f"controllers.py: {msg}", file=sys.stderr)
    sys.exit(2)


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def template_hash(template):
    text = json.dumps(template, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:10]


def random_suffix():
    # Kubernetes' alphabet for generated names (no vowels, no 0/1/3 look-alikes).
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))


def pod_doc(workload, pod_name):
    template = copy.deepcopy(workload["spec"]["template"])
    meta = template.get("metadata", {})
    # In Kubernetes a containerPort without hostPort publishes nothing (pods reach each other
    # on the pod network); podman 4.3 publishes it on the host, so the second pod with port
    # 7400 would fail to start. Such ports are left out; a hostPort stays.
    for c in template["spec"].get("containers", []):
        ports = [p for p in c.get("ports", []) if "hostPort" in p]
        if ports:
            c["ports"] = ports
        else:
            c.pop("ports", None)
    template["spec"]["volumes"] = [mounted_volume(v) for v in template["spec"].get("volumes", [])]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "labels": meta.get("labels", {}),
                     "annotations": meta.get("annotations", {})},
        "spec": template["spec"],
    }


def mounted_volume(volume):
    """A Secret volume as the podman named volume pods.sh fills with its decoded files, a
    ConfigMap volume as the one it fills with the ConfigMap's files; both read-only, as the
    kubelet mounts them."""
    if "secret" in volume:
        claim = volume["secret"]["secretName"]
    elif "configMap" in volume:
        claim = volume["configMap"]["name"]
    else:
        return volume
    return {"name": volume["name"], "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}


def configmap_files(workloads, docs):
    """{ConfigMap name: {file: content}} of every ConfigMap the pods mount."""
    mounted = {v["configMap"]["name"] for w in workloads.values()
               for v in w["spec"]["template"]["spec"].get("volumes", []) if "configMap" in v}
    found = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    missing = mounted - set(found)
    if missing:
        fail(f"pods mount ConfigMaps {sorted(missing)} that the manifests do not hold")
    return {name: found[name] for name in sorted(mounted)}


def secret_names(workloads):
    """Every Secret the pods mount: pods.sh creates and fills a volume for each."""
    return sorted({v["secret"]["secretName"] for w in workloads.values()
                   for v in w["spec"]["template"]["spec"].get("volumes", []) if "secret" in v})


def pod_entry(workload, pod_name, services):
    spec = workload["spec"]["template"]["spec"]
    labels = workload["spec"]["template"].get("metadata", {}).get("labels", {})
    return {
        "pod": pod_name,
        "kind": workload["kind"],
        "controller": workload["metadata"]["name"],
        "role": labels.get("moerl.io/role", ""),
        # Kubernetes' default when the manifest names none.
        "grace_s": spec.get("terminationGracePeriodSeconds", 30),
        "aliases": sorted(s["metadata"]["name"] for s in services
                          if selects(s["spec"].get("selector"), labels)),
    }


def new_pod_name(workload, ordinal, taken):
    name = workload["metadata"]["name"]
    if workload["kind"] == "StatefulSet":
        return f"{name}-{ordinal}"
    while True:
        candidate = f"{name}-{template_hash(workload['spec']['template'])}-{random_suffix()}"
        if candidate not in taken:
            return candidate


def write_pod(out, workload, pod_name):
    (out / "pods").mkdir(parents=True, exist_ok=True)
    with open(out / "pods" / f"{pod_name}.yaml", "w") as f:
        yaml.safe_dump(pod_doc(workload, pod_name), f, sort_keys=False)


def plan(rendered, out):
    out = pathlib.Path(out)
    with open(rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    services = [d for d in docs if d["kind"] == "Service"]
    for s in services:
        if s["spec"].get("clusterIP") != "None":
            fail(f"Service {s['metadata']['name']}: only headless Services map to pod names "
                 "here (podman has no virtual IPs)")
    known = WORKLOADS + PLAYED_ONCE + DROPPED + ("ConfigMap",)
    unknown = [d["kind"] for d in docs if d["kind"] not in known]
    if unknown:
        fail(f"no podman counterpart for kinds {sorted(set(unknown))}")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "resources.yaml", "w") as f:
        yaml.safe_dump_all([d for d in docs if d["kind"] in PLAYED_ONCE], f, sort_keys=False)
    # The ConfigMaps, for `pods.sh down` (it removes their volumes).
    with open(out / "configmaps.yaml", "w") as f:
        yaml.safe_dump_all([d for d in docs if d["kind"] == "ConfigMap"], f, sort_keys=False)
    workloads = {d["metadata"]["name"]: d for d in docs if d["kind"] in WORKLOADS}
    pods = []
    for name, w in workloads.items():
        for ordinal in range(w["spec"].get("replicas", 1)):
            pod_name = new_pod_name(w, ordinal, {p["pod"] for p in pods})
            write_pod(out, w, pod_name)
            pods.append(pod_entry(w, pod_name, services))
    # StatefulSets first, in the order the base lists them (the coordinator's pod must hold
    # its alias before anyone joins; the nodes retry until it answers either way).
    pods.sort(key=lambda p: (p["kind"] != "StatefulSet", p["role"] != "coordinator"))
    with open(out / "plan.json", "w") as f:
        json.dump({"workloads": workloads, "services": services, "pods": pods,
                   "secrets": secret_names(workloads),
                   "configmaps": configmap_files(workloads, docs)}, f, indent=1)
    for p in pods:
        print(p["pod"])


def replace(out, pod_name):
    out = pathlib.Path(out)
    with open(out / "plan.json") as f:
        state = json.load(f)
    entry = next((p for p in state["pods"] if p["pod"] == pod_name), None)
    if entry is None:
        fail(f"no pod {pod_name} in {out}/plan.json")
    w = state["workloads"][entry["controller"]]
    ordinal = int(pod_name.rsplit("-", 1)[1]) if w["kind"] == "StatefulSet" else 0
    new_name = new_pod_name(w, ordinal, {p["pod"] for p in state["pods"]})
    write_pod(out, w, new_name)
    state["pods"] = [p for p in state["pods"] if p["pod"] != pod_name]
    state["pods"].append(pod_entry(w, new_name, state["services"]))
    with open(out / "plan.json", "w") as f:
        json.dump(state, f, indent=1)
    print(new_name)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "plan":
        plan(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "replace":
        replace(sys.argv[2], sys.argv[3])
    else:
        fail("usage: controllers.py plan RENDERED.yaml OUT | replace OUT POD")
