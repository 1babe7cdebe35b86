#!/usr/bin/env python3
"""The GPU node image and its overlay (issue 29), without building or running either (no CUDA
base image and no GPU here):
- deploy/image/Dockerfile.cuda: its CUDA bases are build ARGs with defaults of one CUDA
  version (nvcc's here, where nvcc exists), devel builds and runtime runs, CUDA and NCCL are
  required, the entrypoint is the CPU image's; hadolint passes where it is installed
  (MOERL_HADOLINT or PATH); the CPU image (Dockerfile) stays on Debian 12 without CUDA.
- deploy/image/build-cuda.sh against a stand-in engine: a base that is neither local nor
  pullable exits 3 naming it and builds nothing, --no-pull asks no registry, --check builds
  nothing, available bases build Dockerfile.cuda with both bases; and against this machine's
  real engine with --no-pull (the "not available here" path).
- deploy/overlays/eks-gpu renders (kubectl kustomize) to overlays/efa-spot plus exactly the
  GPU image on the trainer and rollout pods and job.device: cuda; those pods request
  nvidia.com/gpu and vpc.amazonaws.com/efa; no other overlay runs the GPU image or cuda.

Without kubectl the overlay checks are skipped and the test exits 77 after the others."""
import copy
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

# The rendering and config helpers of the local-pods test (same directory).
from local_pods_test import by_name, config_of, fail, render

DEPLOY = pathlib.Path(sys.argv[1])
IMAGE_DIR = DEPLOY / "image"
BUILD_SCRIPT = IMAGE_DIR / "build-cuda.sh"
GPU_IMAGE = "moerl-cuda:latest"
GPU_ROLES = {"moerl-rollout", "moerl-trainer"}
GPU_RESOURCES = ("nvidia.com/gpu", "vpc.amazonaws.com/efa")


def dockerfile(path):
    """(ARG defaults declared before the first FROM, [(base, stage name, lines of the stage)])."""
    args, stages = {}, []
    text = re.sub(r"\\\n", " ", path.read_text())
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word == "ARG" and not stages and "=" in rest:
            k, v = rest.split("=", 1)
            args[k] = v
        elif word == "FROM":
            parts = rest.split()
            stages.append((parts[0], parts[2] if len(parts) == 3 else None, []))
        elif stages:
            stages[-1][2].append(line)
    return args, stages


def check_dockerfile():
    path = IMAGE_DIR / "Dockerfile.cuda"
    args, stages = dockerfile(path)
    devel, runtime = args.get("CUDA_DEVEL_IMAGE", ""), args.get("CUDA_RUNTIME_IMAGE", "")
    if [s[0] for s in stages] != ["${CUDA_DEVEL_IMAGE}", "${CUDA_RUNTIME_IMAGE}"]:
        fail(f"{path}: stages FROM {[s[0] for s in stages]}, want the devel ARG then the runtime ARG")
    m_dev = re.fullmatch(r"(.*/)?nvidia/cuda:(\d+\.\d+\.\d+)-devel-(\S+)", devel)
    m_run = re.fullmatch(r"(.*/)?nvidia/cuda:(\d+\.\d+\.\d+)-runtime-(\S+)", runtime)
    if not (m_dev and m_run):
        fail(f"{path}: CUDA_DEVEL_IMAGE={devel!r}, CUDA_RUNTIME_IMAGE={runtime!r}: want NVIDIA's "
             "devel and runtime images")
    if m_dev.group(2, 3) != m_run.group(2, 3):
        fail(f"{path}: devel {devel} and runtime {runtime} differ in CUDA version or distribution")
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                    if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        release = re.search(r"release (\d+\.\d+)", out).group(1)
        if not m_dev.group(2).startswith(release + "."):
            fail(f"{path}: the bases are CUDA {m_dev.group(2)}, the toolkit here is {release}")
    build, run = stages
    if build[1] != "build":
        fail(f"{path}: the devel stage must be named build (COPY --from=build)")
    body = " ".join(build[2])
    for flag in ("-DMOERL_ENABLE_CUDA=ON", "-DMOERL_ENABLE_NCCL=ON", "-DMOERL_BUILD_TESTS=OFF"):
        if flag not in body:
            fail(f"{path}: the build does not pass {flag} (AUTO could build a CPU binary)")
    if "MOERL_BASE_IMAGE_LIBS=/usr/local/cuda" not in body:
        fail(f"{path}: runtime-packages.sh must leave the CUDA libraries to the runtime image")
    for line in run[2]:
        if line.startswith("COPY --from=") and line.split()[1] != "--from=build":
            fail(f"{path}: {line}: no such stage")
    if not any("ldd /usr/local/bin/moerl" in line for line in run[2]):
        fail(f"{path}: the runtime stage does not check that every library resolves")
    entry = [line for line in run[2] if line.startswith("ENTRYPOINT")]
    _, cpu_stages = dockerfile(IMAGE_DIR / "Dockerfile")
    cpu_entry = [line for line in cpu_stages[-1][2] if line.startswith("ENTRYPOINT")]
    if entry != cpu_entry:
        fail(f"{path}: entrypoint {entry}, the CPU image's is {cpu_entry} (the pods' probes and "
             "args run /usr/local/bin/moerl under tini)")
    if any("cuda" in base.lower() for base, _, _ in cpu_stages) or \
            [base for base, _, _ in cpu_stages] != ["debian:12", "debian:12"]:
        fail(f"{IMAGE_DIR / 'Dockerfile'}: the CPU image must stay on debian:12: "
             f"{[b for b, _, _ in cpu_stages]}")
    hadolint = os.environ.get("MOERL_HADOLINT") or shutil.which("hadolint")
    if hadolint:
        # DL3008 (pin apt versions): the images take the distribution's versions on purpose.
        r = subprocess.run([hadolint, "--no-color", "--ignore", "DL3008", str(path)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"hadolint {path}:\n{r.stdout}{r.stderr}")
        print(f"hadolint: {path.name} clean (DL3008 ignored)")
    else:
        print("hadolint not found (MOERL_HADOLINT or PATH): lint skipped, structure checked")
    print(f"Dockerfile.cuda: {devel} builds, {runtime} runs")
    return devel, runtime


STUB_ENGINE = """#!/bin/sh
# A stand-in container engine: logs every call; images listed in $STUB_LOCAL exist, pulls fail.
echo "$*" >> "$STUB_LOG"
case "$1 $2" in
  "image inspect") grep -qxF "$3" "$STUB_LOCAL" 2>/dev/null; exit $? ;;
esac
case "$1" in
  pull) echo "Error: dial tcp: lookup registry: no such host" >&2; exit 125 ;;
  build) exit 0 ;;
esac
exit 99
"""


def run_script(args, env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run(["bash", str(BUILD_SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def check_build_script(devel, runtime):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        engine = tmp / "podman"
        engine.write_text(STUB_ENGINE)
        engine.chmod(0o755)
        log, local = tmp / "calls", tmp / "local"

        def calls():
            text = log.read_text() if log.exists() else ""
            log.unlink(missing_ok=True)
            return text.splitlines()

        env = {"MOERL_IMAGE_ENGINE": str(engine), "STUB_LOG": str(log), "STUB_LOCAL": str(local)}
        # Neither local nor pullable: exit 3, the image and the CPU default named, no build.
        r = run_script([], env)
        c = calls()
        if r.returncode != 3 or devel not in r.stderr or "not available" not in r.stderr \
                or "pulling it failed" not in r.stderr or "CPU node image" not in r.stderr:
            fail(f"build-cuda.sh without a base: exit {r.returncode}, stderr {r.stderr!r}")
        if any(x.startswith("build") for x in c) or f"pull {devel}" not in c:
            fail(f"build-cuda.sh without a base: engine calls {c}")
        # --no-pull: no registry asked.
        r = run_script(["--no-pull"], env)
        c = calls()
        if r.returncode != 3 or "--no-pull" not in r.stderr or any(x.startswith("pull") for x in c):
            fail(f"build-cuda.sh --no-pull: exit {r.returncode}, calls {c}, stderr {r.stderr!r}")
        # Only the devel image local: the runtime one is named.
        local.write_text(devel + "\n")
        r = run_script(["--no-pull"], env)
        calls()
        if r.returncode != 3 or runtime not in r.stderr:
            fail(f"build-cuda.sh with only {devel}: exit {r.returncode}, stderr {r.stderr!r}")
        # Both local: --check builds nothing, a plain run builds Dockerfile.cuda from them.
        local.write_text(f"{devel}\n{runtime}\n")
        r = run_script(["--check"], env)
        c = calls()
        if r.returncode != 0 or any(x.startswith("build") for x in c):
            fail(f"build-cuda.sh --check with both bases: exit {r.returncode}, calls {c}")
        r = run_script(["-t", "reg.example/moerl-cuda:t1"], env)
        builds = [x for x in calls() if x.startswith("build")]
        want = (f"build -f deploy/image/Dockerfile.cuda --build-arg CUDA_DEVEL_IMAGE={devel} "
                f"--build-arg CUDA_RUNTIME_IMAGE={runtime} -t reg.example/moerl-cuda:t1 "
                "--pull=never --ignorefile deploy/image/dockerignore .")
        if r.returncode != 0 or builds != [want]:
            fail(f"build-cuda.sh with both bases: exit {r.returncode}, builds {builds}, want "
                 f"[{want!r}]; stderr {r.stderr!r}")
        # Other bases by environment reach the build.
        local.write_text("my/cuda:dev\nmy/cuda:run\n")
        r = run_script([], dict(env, CUDA_DEVEL_IMAGE="my/cuda:dev",
                                CUDA_RUNTIME_IMAGE="my/cuda:run"))
        builds = [x for x in calls() if x.startswith("build")]
        if r.returncode != 0 or len(builds) != 1 or "CUDA_DEVEL_IMAGE=my/cuda:dev" not in builds[0] \
                or "CUDA_RUNTIME_IMAGE=my/cuda:run" not in builds[0]:
            fail(f"build-cuda.sh with CUDA_*_IMAGE set: exit {r.returncode}, builds {builds}")
        r = run_script(["--bogus"], env)
        if r.returncode != 2 or "--bogus" not in r.stderr:
            fail(f"build-cuda.sh --bogus: exit {r.returncode}, stderr {r.stderr!r}")
        r = run_script([], dict(env, MOERL_IMAGE_ENGINE=str(tmp / "no-such-engine")))
        if r.returncode != 3 or "no container engine" not in r.stderr:
            fail(f"build-cuda.sh without an engine: exit {r.returncode}, stderr {r.stderr!r}")
    # This machine's own engine, local images only: the path a builder without the bases takes.
    engine = shutil.which("podman") or shutil.which("docker")
    if engine:
        have = all(subprocess.run([engine, "image", "inspect", i], capture_output=True)
                   .returncode == 0 for i in (devel, runtime))
        r = run_script(["--check", "--no-pull"], {"MOERL_IMAGE_ENGINE": engine})
        if r.returncode != (0 if have else 3):
            fail(f"build-cuda.sh --check --no-pull with {engine} (bases local: {have}): exit "
                 f"{r.returncode}, stderr {r.stderr!r}")
        print(f"build-cuda.sh with {os.path.basename(engine)} here: "
              f"{'bases local' if have else r.stderr.splitlines()[0]}")
    print("build-cuda.sh checks passed")


def check_overlays():
    efa, gpu = render(DEPLOY / "overlays" / "efa-spot"), render(DEPLOY / "overlays" / "eks-gpu")
    kinds = ("Deployment", "StatefulSet")
    efa_w, gpu_w = by_name(efa, kinds), by_name(gpu, kinds)
    if set(efa_w) != set(gpu_w):
        fail(f"workloads differ: efa-spot {sorted(efa_w)}, eks-gpu {sorted(gpu_w)}")
    efa_cfg, efa_cm = config_of(efa)
    gpu_cfg, gpu_cm = config_of(gpu)
    for name, w in gpu_w.items():
        c = w["spec"]["template"]["spec"]["containers"][0]
        res = c.get("resources", {})
        if name in GPU_ROLES:
            if c["image"] != GPU_IMAGE:
                fail(f"eks-gpu: {name} runs {c['image']}, want {GPU_IMAGE}")
            for r in GPU_RESOURCES:
                if not res.get("limits", {}).get(r) or res["limits"][r] != res["requests"].get(r):
                    fail(f"eks-gpu: {name} does not request {r} with requests = limits: {res}")
        elif c["image"] == GPU_IMAGE or any(r in res.get("limits", {}) for r in GPU_RESOURCES):
            fail(f"eks-gpu: {name} (no tensors) runs {c['image']} with {res}: the CPU image, no GPU")
        want = copy.deepcopy(efa_w[name])
        if name in GPU_ROLES:
            want["spec"]["template"]["spec"]["containers"][0]["image"] = GPU_IMAGE
        for v in want["spec"]["template"]["spec"]["volumes"]:
            if v.get("configMap", {}).get("name") == efa_cm:
                v["configMap"]["name"] = gpu_cm
        if w != want:
            fail(f"{name}: eks-gpu differs from efa-spot beyond the GPU image:\nwant "
                 f"{json.dumps(want, sort_keys=True)}\ngot  {json.dumps(w, sort_keys=True)}")
    changed = {k: gpu_cfg.get(k) for k in set(efa_cfg) | set(gpu_cfg)
               if efa_cfg.get(k) != gpu_cfg.get(k)}
    if changed != {"job.device": "cuda"}:
        fail(f"eks-gpu's moerl.yaml changes {changed} against efa-spot's; want job.device: cuda only")
    others = lambda docs: sorted((d["kind"], d["metadata"]["name"]) for d in docs
                                 if d["kind"] not in kinds + ("ConfigMap",))
    if others(gpu) != others(efa):
        fail(f"eks-gpu's other resources {others(gpu)} are not efa-spot's {others(efa)}")
    # The CPU image stays the default: no other overlay runs the GPU image or job.device cuda.
    for overlay in sorted((DEPLOY / "overlays").iterdir()):
        if overlay.name == "eks-gpu":
            continue
        docs = render(overlay)
        images = {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in docs
                  if d["kind"] in kinds}
        device = config_of(docs)[0].get("job.device", "cpu")
        if any(i.split(":")[0].endswith("moerl-cuda") for i in images) or device != "cpu":
            fail(f"{overlay.name}: images {sorted(images)}, job.device {device}: the GPU image and "
                 "cuda belong to eks-gpu only")
    print(f"eks-gpu checks passed: efa-spot with {GPU_IMAGE} on {sorted(GPU_ROLES)} and "
          "job.device cuda; every other overlay on the CPU image")


def main():
    devel, runtime = check_dockerfile()
    check_build_script(devel, runtime)
    if shutil.which("kubectl") is None:
        print("SKIP: kubectl is missing (not in Debian): overlays not rendered", flush=True)
        sys.exit(77)
    check_overlays()
    print("gpu image checks passed")


if __name__ == "__main__":
    main()
