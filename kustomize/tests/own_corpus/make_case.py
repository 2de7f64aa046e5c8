#!/usr/bin/env python3
"""Create or refresh cases of the own kustomize corpus (see README.md).

  make_case.py add <checkout> <owner/repo> <commit> <kustomization dir> [selection]
      Traces `kubectl kustomize <dir>` in an upstream checkout (strace, openat), copies the
      files the build opened into inputs/<owner>__<repo>/ (same relative paths as upstream),
      rebuilds from that copy, checks the bytes equal the upstream build, and writes
      cases/<owner>__<repo>/<dir with / as __>/{case.toml,expected.yaml}.
      The load restrictor is the default (rootOnly) unless only LoadRestrictionsNone builds.
  make_case.py verify [<checkouts dir>]
      Rebuilds every case from its input tree and checks expected.yaml is byte-identical
      (and, with <checkouts dir>/<owner>__<repo>, identical to the upstream build too).

Needs kubectl (embedded kustomize), strace and PyYAML.
"""
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
KFILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def kustomize(root, kdir, restrictor, trace=None):
    cmd = ["kubectl", "kustomize", kdir]
    if restrictor == "none":
        cmd[2:2] = ["--load-restrictor", "LoadRestrictionsNone"]
    if trace:
        cmd = ["strace", "-f", "-qq", "-e", "trace=openat", "-o", trace] + cmd
    start = time.perf_counter()
    p = subprocess.run(cmd, cwd=root, capture_output=True)
    ms = round((time.perf_counter() - start) * 1000)
    return p.returncode, p.stdout, ms


def opened_files(log, root):
    pending, files = {}, set()
    pat = re.compile(r'^(\d+)\s+(?:openat\(AT_FDCWD, "((?:[^"\\]|\\.)*)".*?|<\.\.\. openat resumed>.*?)'
                     r"(?:(<unfinished \.\.\.>)|= (-?\d+))")
    with open(log) as f:
        for line in f:
            m = pat.match(line)
            if not m:
                continue
            pid, path, unfinished, rc = m.groups()
            if unfinished:
                pending[pid] = path
                continue
            if path is None:
                path = pending.pop(pid, None)
            if path is None or int(rc) < 0:
                continue
            full = os.path.normpath(os.path.join(root, path))
            if full.startswith(root + os.sep) and os.path.isfile(full):
                files.add(os.path.relpath(full, root))
    return files


def case_dir(repo_key, kdir):
    return os.path.join(HERE, "cases", repo_key, kdir.replace("/", "__"))


def fields(input_root, files, top):
    feats, top_fields = set(), []
    for rel in sorted(files):
        if os.path.basename(rel) not in KFILES:
            continue
        with open(os.path.join(input_root, rel)) as f:
            doc = yaml.safe_load(f) or {}
        keys = sorted(k for k in doc if k not in ("apiVersion", "kind"))
        feats.update(keys)
        if os.path.dirname(rel) == top:
            top_fields = keys
    return sorted(feats), top_fields


def toml_list(items):
    return "[" + ", ".join(f'"{i}"' if isinstance(i, str) else str(i) for i in items) + "]"


def add(checkout, repo, commit, kdir, selection="pick"):
    checkout = os.path.abspath(checkout)
    kdir = kdir.strip("/")
    repo_key = repo.replace("/", "__")
    restrictor = "rootOnly"
    rc, upstream, _ = kustomize(checkout, kdir, restrictor)
    if rc != 0:
        restrictor = "none"
        rc, upstream, _ = kustomize(checkout, kdir, restrictor)
        if rc != 0:
            sys.exit(f"{kdir}: does not build offline")
    log = "/tmp/make_case.strace"
    kustomize(checkout, kdir, restrictor, trace=log)
    files = opened_files(log, checkout)
    input_root = os.path.join(HERE, "inputs", repo_key)
    for rel in sorted(files):
        dst = os.path.join(input_root, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(checkout, rel), dst)
    other = "none" if restrictor == "rootOnly" else "rootOnly"
    orc, oout, _ = kustomize(checkout, kdir, other)
    runs = [kustomize(input_root, kdir, restrictor) for _ in range(3)]
    out = runs[0][1]
    if any(r[0] != 0 for r in runs) or out != upstream:
        sys.exit(f"{kdir}: the copied input does not reproduce the upstream output")
    samples = [r[2] for r in runs]
    feats, top_fields = fields(input_root, files, kdir)
    cdir = case_dir(repo_key, kdir)
    os.makedirs(cdir, exist_ok=True)
    with open(os.path.join(cdir, "expected.yaml"), "wb") as f:
        f.write(out)
    objects = out.count(b"\n---\n") + 1 if out else 0
    meta = [
        ("repo", f'"{repo}"'),
        ("upstream_path", f'"{kdir}"'),
        ("commit", f'"{commit}"'),
        ("input", f'"../../../inputs/{repo_key}"'),
        ("kustomization_dir", f'"{kdir}"'),
        ("load_restrictor", f'"{restrictor}"'),
        ("object_count", objects),
        ("build_ms_median", round(statistics.median(samples))),
        ("build_ms_samples", toml_list(samples)),
        ("output_bytes", len(out)),
        ("output_sha256", f'"{hashlib.sha256(out).hexdigest()}"'),
        ("deterministic", str(all(r[1] == out for r in runs)).lower()),
        ("other_restrictor_ok", str(orc == 0).lower()),
        ("other_restrictor_same_output", str(orc == 0 and oout == out).lower()),
        ("features", toml_list(feats)),
        ("top_level_fields", toml_list(top_fields)),
        ("kustomization_files", sum(1 for r in files if os.path.basename(r) in KFILES)),
        ("input_files", len(files)),
        ("selection", f'"{selection}"'),
    ]
    with open(os.path.join(cdir, "case.toml"), "w") as f:
        f.writelines(f"{k} = {v}\n" for k, v in meta)
    print(f"{repo_key}/{kdir}: {objects} objects, {len(out)} bytes, {restrictor}, {len(files)} files")


def toml_get(text, key):
    m = re.search(rf'^{key} = "(.*)"$', text, re.M)
    return m.group(1) if m else None


def verify(checkouts=None):
    bad = 0
    for repo_key in sorted(os.listdir(os.path.join(HERE, "cases"))):
        for case in sorted(os.listdir(os.path.join(HERE, "cases", repo_key))):
            cdir = os.path.join(HERE, "cases", repo_key, case)
            meta = open(os.path.join(cdir, "case.toml")).read()
            kdir, restrictor = toml_get(meta, "kustomization_dir"), toml_get(meta, "load_restrictor")
            root = os.path.normpath(os.path.join(cdir, toml_get(meta, "input")))
            expected = open(os.path.join(cdir, "expected.yaml"), "rb").read()
            rc, out, _ = kustomize(root, kdir, restrictor)
            ok = rc == 0 and out == expected
            if ok and checkouts:
                rc, up, _ = kustomize(os.path.join(checkouts, repo_key), kdir, restrictor)
                ok = rc == 0 and up == expected
            if not ok:
                bad += 1
                print(f"MISMATCH {repo_key}/{case}")
    print("verify:", "all cases reproduce" if bad == 0 else f"{bad} cases differ")
    return bad


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "add":
        add(*sys.argv[2:7])
    elif len(sys.argv) in (2, 3) and sys.argv[1] == "verify":
        sys.exit(1 if verify(*sys.argv[2:3]) else 0)
    else:
        sys.exit(__doc__)
