#!/usr/bin/env python3
"""Writes the generator merge/replace cases and their expected output from the reference kustomize.

Run: python3 kustomize/tests/generator_merge/gen.py   (needs `kubectl` with Kustomize v5.5.0, PyYAML)
Every case is a directory <case>/ holding a kustomization tree (base/, overlay/, maybe top/);
the tree named by BUILD is built with `kubectl kustomize` and its exact output is written to
<case>/expected.yaml (or the error to <case>/expected-error.txt). kustomize/tests/generator_merge.rs
builds the same directory with our engine and compares the text.
"""
import os, shutil, subprocess, sys
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))

DEPLOY = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  template:
    spec:
      containers:
      - name: c
        image: nginx
        envFrom:
        - configMapRef:
            name: cm
        - secretRef:
            name: sec
"""


def gen(name, behavior=None, literals=("k=v",), options=None, secret=False, stype=None, extra=None):
    g = {"name": name}
    if behavior:
        g["behavior"] = behavior
    g["literals"] = list(literals)
    if stype:
        g["type"] = stype
    if options is not None:
        g["options"] = options
    if extra:
        g.update(extra)
    return g


def kust(**fields):
    return yaml.safe_dump(fields, sort_keys=False)


CASES = {}


def case(name, files, build="overlay"):
    CASES[name] = (files, build)


# 1. The hash option: base disableNameSuffixHash x overlay behavior x overlay's own option.
for base_off in (False, True):
    for behavior in ("merge", "replace"):
        for ov in ("none", "off", "on"):
            bopts = {"disableNameSuffixHash": True} if base_off else None
            oopts = {"none": None, "off": {"disableNameSuffixHash": True},
                     "on": {"disableNameSuffixHash": False}}[ov]
            base = kust(resources=["deploy.yaml"],
                        configMapGenerator=[gen("cm", literals=["a=1", "b=2"], options=bopts)],
                        secretGenerator=[gen("sec", literals=["s=1"], options=bopts)])
            overlay = kust(resources=["../base"],
                           configMapGenerator=[gen("cm", behavior, ["b=3", "c=4"], oopts)],
                           secretGenerator=[gen("sec", behavior, ["t=2"], oopts)])
            case(f"hash-base-{'off' if base_off else 'on'}-{behavior}-overlay-{ov}",
                 {"base/kustomization.yaml": base, "base/deploy.yaml": DEPLOY,
                  "overlay/kustomization.yaml": overlay})

# 2. The hash option set through the base's generatorOptions.
for behavior in ("merge", "replace"):
    base = kust(resources=["deploy.yaml"], generatorOptions={"disableNameSuffixHash": True},
                configMapGenerator=[gen("cm", literals=["a=1"])],
                secretGenerator=[gen("sec", literals=["s=1"])])
    overlay = kust(resources=["../base"],
                   configMapGenerator=[gen("cm", behavior, ["b=2"])],
                   secretGenerator=[gen("sec", behavior, ["t=2"])])
    case(f"global-options-base-off-{behavior}",
         {"base/kustomization.yaml": base, "base/deploy.yaml": DEPLOY,
          "overlay/kustomization.yaml": overlay})
    base = kust(resources=["deploy.yaml"],
                configMapGenerator=[gen("cm", literals=["a=1"])],
                secretGenerator=[gen("sec", literals=["s=1"])])
    overlay = kust(resources=["../base"], generatorOptions={"disableNameSuffixHash": True},
                   configMapGenerator=[gen("cm", behavior, ["b=2"])],
                   secretGenerator=[gen("sec", behavior, ["t=2"])])
    case(f"global-options-overlay-off-{behavior}",
         {"base/kustomization.yaml": base, "base/deploy.yaml": DEPLOY,
          "overlay/kustomization.yaml": overlay})

# 3. Labels, annotations and immutable from base and overlay.
for behavior in ("merge", "replace"):
    for ov in ("none", "own"):
        bopts = {"labels": {"from": "base", "shared": "base"},
                 "annotations": {"note": "base", "shared": "base"}, "immutable": True}
        oopts = None if ov == "none" else {
            "labels": {"shared": "overlay", "extra": "overlay"},
            "annotations": {"shared": "overlay", "more": "overlay"}, "immutable": True}
        base = kust(configMapGenerator=[gen("cm", literals=["a=1"], options=bopts)],
                    secretGenerator=[gen("sec", literals=["s=1"], options=bopts)])
        overlay = kust(resources=["../base"],
                       configMapGenerator=[gen("cm", behavior, ["b=2"], oopts)],
                       secretGenerator=[gen("sec", behavior, ["t=2"], oopts)])
        case(f"meta-{behavior}-overlay-{ov}",
             {"base/kustomization.yaml": base, "overlay/kustomization.yaml": overlay})
    # immutable only from the overlay
    base = kust(configMapGenerator=[gen("cm", literals=["a=1"])])
    overlay = kust(resources=["../base"],
                   configMapGenerator=[gen("cm", behavior, ["b=2"], {"immutable": True})])
    case(f"immutable-overlay-only-{behavior}",
         {"base/kustomization.yaml": base, "overlay/kustomization.yaml": overlay})

# 4. Secret type from base and overlay.
for behavior in ("merge", "replace"):
    for ot in (None, "example.com/other"):
        base = kust(secretGenerator=[gen("sec", literals=["s=1"], stype="example.com/base")])
        overlay = kust(resources=["../base"],
                       secretGenerator=[gen("sec", behavior, ["t=2"], stype=ot)])
        case(f"secret-type-{behavior}-overlay-{'own' if ot else 'none'}",
             {"base/kustomization.yaml": base, "overlay/kustomization.yaml": overlay})

# 5. A plain ConfigMap (not generated) in the base, merged or replaced by a generator.
PLAIN = """apiVersion: v1
kind: ConfigMap
metadata:
  name: cm
  labels:
    plain: "yes"
  annotations:
    plain: "yes"
  finalizers:
  - example.com/keep
data:
  a: "1"
  b: "2"
"""
for behavior in ("merge", "replace"):
    for ov in ("none", "off"):
        oopts = None if ov == "none" else {"disableNameSuffixHash": True, "labels": {"x": "z"}}
        base = kust(resources=["cm.yaml", "deploy.yaml"],
                    secretGenerator=[gen("sec", literals=["s=1"])])
        overlay = kust(resources=["../base"],
                       configMapGenerator=[gen("cm", behavior, ["b=3"], oopts)])
        case(f"plain-base-{behavior}-overlay-{ov}",
             {"base/kustomization.yaml": base, "base/cm.yaml": PLAIN,
              "base/deploy.yaml": DEPLOY, "overlay/kustomization.yaml": overlay})

# 6. Three levels: base without hash, middle merges, top merges or replaces (with a prefix).
for behavior in ("merge", "replace"):
    for base_off in (False, True):
        bopts = {"disableNameSuffixHash": True} if base_off else None
        base = kust(resources=["deploy.yaml"], namePrefix="b-",
                    configMapGenerator=[gen("cm", literals=["a=1"], options=bopts)],
                    secretGenerator=[gen("sec", literals=["s=1"], options=bopts)])
        mid = kust(resources=["../base"], namespace="mid",
                   configMapGenerator=[gen("b-cm", "merge", ["b=2"])],
                   secretGenerator=[gen("b-sec", "merge", ["t=2"])])
        top = kust(resources=["../overlay"], nameSuffix="-t",
                   configMapGenerator=[gen("b-cm", behavior, ["c=3"], extra={"namespace": "mid"})],
                   secretGenerator=[gen("b-sec", behavior, ["u=3"], extra={"namespace": "mid"})])
        case(f"three-levels-base-{'off' if base_off else 'on'}-{behavior}",
             {"base/kustomization.yaml": base, "base/deploy.yaml": DEPLOY,
              "overlay/kustomization.yaml": mid, "top/kustomization.yaml": top}, build="top")

# 7. Origin annotations with merge and replace.
for behavior in ("merge", "replace"):
    base = kust(configMapGenerator=[gen("cm", literals=["a=1"])])
    overlay = kust(resources=["../base"], buildMetadata=["originAnnotations"],
                   configMapGenerator=[gen("cm", behavior, ["b=2"])])
    case(f"origin-{behavior}",
         {"base/kustomization.yaml": base, "overlay/kustomization.yaml": overlay})
    base = kust(buildMetadata=["originAnnotations"], configMapGenerator=[gen("cm", literals=["a=1"])])
    overlay = kust(resources=["../base"], buildMetadata=["originAnnotations"],
                   configMapGenerator=[gen("cm", behavior, ["b=2"])])
    case(f"origin-both-{behavior}",
         {"base/kustomization.yaml": base, "overlay/kustomization.yaml": overlay})

# 8. Merge or replace of an id that is not there; create of one that is.
base = kust(configMapGenerator=[gen("cm", literals=["a=1"])])
case("merge-missing", {"base/kustomization.yaml": base, "overlay/kustomization.yaml":
                       kust(resources=["../base"], configMapGenerator=[gen("other", "merge", ["b=2"])])})
case("create-existing", {"base/kustomization.yaml": base, "overlay/kustomization.yaml":
                         kust(resources=["../base"], configMapGenerator=[gen("cm", None, ["b=2"])])})


def main():
    for d in os.listdir(HERE):
        if os.path.isdir(os.path.join(HERE, d)):
            shutil.rmtree(os.path.join(HERE, d))
    for name, (files, build) in sorted(CASES.items()):
        root = os.path.join(HERE, name)
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        with open(os.path.join(root, "BUILD"), "w") as f:
            f.write(build + "\n")
        p = subprocess.run(["kubectl", "kustomize", os.path.join(root, build)],
                           capture_output=True, text=True)
        if p.returncode == 0:
            with open(os.path.join(root, "expected.yaml"), "w") as f:
                f.write(p.stdout)
        else:
            with open(os.path.join(root, "expected-error.txt"), "w") as f:
                f.write(p.stderr.split("err=", 1)[-1].strip().replace(HERE, "<cases>") + "\n")
        print(name, "ok" if p.returncode == 0 else "ERROR", file=sys.stderr)


if __name__ == "__main__":
    main()
