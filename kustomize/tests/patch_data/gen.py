#!/usr/bin/env python3
"""Regenerates the expected values of the patch tests with the reference kustomize.

Run: python3 kustomize/tests/patch_data/gen.py   (needs `kubectl` with Kustomize v5.5.0 and PyYAML)
Each case is built with `kubectl kustomize`; the resulting objects (or the error) are written to
cases.json next to this script. The Rust tests (kustomize/tests/patch_*.rs) replay every case
through the patch module and compare.
"""
import json, os, subprocess, sys, tempfile
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cases_src import CASES  # noqa: E402


def build(files):
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        p = subprocess.run(["kubectl", "kustomize", d], capture_output=True, text=True)
        if p.returncode != 0:
            err = p.stderr.strip()
            return None, err.split("err=", 1)[-1].strip().strip('<>"').strip()
        return [x for x in yaml.safe_load_all(p.stdout) if x is not None], None


def main():
    out = []
    for case in CASES:
        resources = [x for x in yaml.safe_load_all(case["resources"]) if x is not None]
        kust = {"resources": ["res.yaml"]}
        kust.update(case["kustomization"])
        files = {"kustomization.yaml": yaml.safe_dump(kust, sort_keys=False), "res.yaml": case["resources"]}
        objs, err = build(files)
        entry = {"name": case["name"], "kind": case["kind"], "resources": resources}
        if case["kind"] != "patches":
            entry["kustomization"] = case["kustomization"]
        if case["kind"] == "patches":
            entry["patches"] = [
                {"docs": [x for x in yaml.safe_load_all(pp["patch"]) if x is not None], "target": pp.get("target")}
                for pp in case["kustomization"]["patches"]
            ]
        if err is not None:
            entry["error"] = err
        else:
            entry["expected"] = objs
        out.append(entry)
        print(case["name"], "ERROR" if err else "ok", file=sys.stderr)
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"), sort_keys=False)
        f.write("\n")


if __name__ == "__main__":
    main()
