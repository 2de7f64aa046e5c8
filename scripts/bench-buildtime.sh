#!/usr/bin/env bash
# Build time inside the controller (issue 15): our kustomize-controller's fetch + build stages
# (bench/src/bin/rflux-buildtime.rs) against Flux kustomize-controller v1.9.6's fetch +
# generate + build + YAML + decode (bench/flux-buildtime, Go), for the largest corpus cases.
#
# Each case's input root is packed into a tar.gz artifact, served over HTTP on 127.0.0.1, and
# built as a Kustomization whose only setting is spec.path = the case's kustomization_dir.
# The two sides run interleaved (ours, flux, ours, flux, ... BUILDTIME_K rounds), each run
# doing one untimed warm-up pass first; the table shows medians over the rounds.
#
# Knobs: BUILDTIME_K (rounds, default 7), BUILDTIME_CASES (largest N per corpus by output
# bytes, default 10), BUILDTIME_CORPORA (space-separated "cases" dirs; default: the shared
# corpus and kustomize/tests/own_corpus/cases, whichever exist), GO (default: go on PATH, else
# /usr/local/go/bin/go). Without Go the Flux column is skipped, with a message.
# Results: $CARGO_TARGET_DIR/bench/buildtime.md (table), buildtime.jsonl (every sample),
# buildtime.cases.tsv and buildtime.load (what the table is made from; `--report` re-renders
# the table from them without running anything).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
out="$target/bench"
mkdir -p "$out"
k=${BUILDTIME_K:-7}
ncases=${BUILDTIME_CASES:-10}
corpora=${BUILDTIME_CORPORA:-"$repo/../shared/kustomize-corpus/cases $repo/kustomize/tests/own_corpus/cases"}

work=$(mktemp -d "${TMPDIR:-/tmp}/rflux-buildtime.XXXXXX")
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- table (from the files in $out) ----------------------------------------------------------
report() {
python3 - "$out/buildtime.cases.tsv" "$out/buildtime.jsonl" "$out/buildtime.load" <<'PY' | tee "$out/buildtime.md"
import json, statistics, sys

cases_tsv, samples, loads = sys.argv[1:4]
before, after = (open(loads).read().splitlines() + ["?", "?"])[:2]
cases = [l.rstrip("\n").split("\t") for l in open(cases_tsv) if l.strip()]
by = {}
errors = set()
for line in open(samples):
    s = json.loads(line)
    key = (s["case"], s["side"], s.get("mode", ""))
    if s.get("error"):
        errors.add((s["case"], s["side"]))
        continue
    by.setdefault(key, []).append(s)
have_flux = any(key[1] == "flux" for key in by)
k = max((len(v) for v in by.values()), default=0)

def med(case, side, mode, *fields):
    """Median over the rounds of the sum of these phases (default: the total)."""
    xs = [sum(s[f] for f in fields or ("total_ms",)) for s in by.get((case, side, mode), [])]
    return statistics.median(xs) if xs else None

def f(x):
    return "—" if x is None else (f"{x:.0f}" if x >= 100 else f"{x:.1f}")

print(f"# Build time inside the controller: fetch + build of one artifact, ours vs Flux kustomize-controller v1.9.6")
print()
print(f"Medians of {k} interleaved rounds (ms). load before: {before}")
print()
print("| case | objects | output KB | ours ms (cold/warm) | Flux ms | ratio Flux/ours (cold/warm) |")
print("|---|---:|---:|---:|---:|---:|")
notes = []
cold_r, warm_r = [], []
for name, _art, _dg, kdir, lr, objs, size in cases:
    oc, ow = med(name, "ours", "cold"), med(name, "ours", "warm")
    fx = med(name, "flux", "") if have_flux else None
    ratio = "—"
    if fx is not None and oc and ow:
        ratio = f"{fx / oc:.1f}× / {fx / ow:.1f}×"
        cold_r.append(fx / oc)
        warm_r.append(fx / ow)
    label = name + (" (load_restrictor none)" if lr == "none" else "")
    print(f"| {label} | {objs} | {int(size) / 1024:.0f} | {f(oc)} / {f(ow)} | {f(fx)} | {ratio} |")
    for side in ("ours", "flux"):
        got = {s["objects"] for mode in ("cold", "warm", "") for s in by.get((name, side, mode), [])}
        if got and got != {int(objs)}:
            notes.append(f"{name}: {side} built {sorted(got)} objects, the corpus expects {objs}")
        if (name, side) in errors:
            notes.append(f"{name}: {side} failed in some rounds (see buildtime.stderr)")
if cold_r:
    print(f"| geometric mean | | | | | {statistics.geometric_mean(cold_r):.1f}× / {statistics.geometric_mean(warm_r):.1f}× |")
print()
print(f"load after: {after}")
if not have_flux:
    print()
    print("Flux column skipped: no Go toolchain or the Flux harness did not build.")
print()
print("Phases (medians, ms): ours cold = fetch (download+verify+untar into the cache, read in place) / build; "
      "ours warm = fetch (cache hit) / build; Flux = fetch (download+verify+untar) / "
      "generate / build / AsYaml / decode")
print()
print("Build ratio: Flux (generate + build + AsYaml + decode) / ours warm build, i.e. from the")
print("unpacked files to objects, without the file system work of the fetch.")
print()
print("| case | ours cold | ours warm | Flux | build ratio |")
print("|---|---:|---:|---:|---:|")
build_r = []
for name, *_ in cases:
    oc = f"{f(med(name, 'ours', 'cold', 'fetch_ms'))} / {f(med(name, 'ours', 'cold', 'build_ms'))}"
    ow = f"{f(med(name, 'ours', 'warm', 'fetch_ms'))} / {f(med(name, 'ours', 'warm', 'build_ms'))}"
    fx = " / ".join(f(med(name, "flux", "", p)) for p in ("fetch_ms", "generate_ms", "build_ms", "yaml_ms", "decode_ms")) if have_flux else "—"
    fb = med(name, "flux", "", "generate_ms", "build_ms", "yaml_ms", "decode_ms")
    ob = med(name, "ours", "warm", "build_ms")
    br = "—"
    if fb and ob:
        build_r.append(fb / ob)
        br = f"{fb / ob:.1f}×"
    print(f"| {name} | {oc} | {ow} | {fx} | {br} |")
if build_r:
    print(f"| geometric mean | | | | {statistics.geometric_mean(build_r):.1f}× |")
for n in notes:
    print()
    print(f"NOTE: {n}")
PY
}

if [[ "${1:-}" == --report ]]; then
  report
  exit 0
fi

# --- binaries --------------------------------------------------------------------------------
nice cargo build --release -p rflux-bench --bin rflux-buildtime
ours="$target/release/rflux-buildtime"
go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
flux=""
if [[ -x "$go" ]]; then
  if (cd bench/flux-buildtime && GOTOOLCHAIN=local GOFLAGS=-mod=mod nice "$go" build -o "$out/flux-buildtime" .); then
    flux="$out/flux-buildtime"
  else
    echo "bench-buildtime: building the Flux harness (bench/flux-buildtime) failed: Flux column skipped" >&2
  fi
else
  echo "bench-buildtime: Go not found (set GO=...): Flux column skipped" >&2
fi

# --- cases and artifacts ---------------------------------------------------------------------
# cases.tsv: name, artifact file, digest, kustomization_dir, load_restrictor, objects, bytes
python3 - "$work" "$ncases" $corpora <<'PY'
import gzip, hashlib, os, sys, tarfile, tomllib

work, n, corpora = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
arts = os.path.join(work, "artifacts")
os.makedirs(arts, exist_ok=True)
packed = {}  # input root -> (file name, digest)

def pack(root):
    """A deterministic tar.gz of the input root (paths relative to it, like an artifact)."""
    root = os.path.realpath(root)
    if root in packed:
        return packed[root]
    name = f"a{len(packed)}.tar.gz"
    path = os.path.join(arts, name)
    def norm(ti):
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = 0
        return ti
    with open(path, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for d, dirs, files in os.walk(root):
                    dirs.sort()
                    for f in sorted(files + [x for x in dirs if os.path.islink(os.path.join(d, x))]):
                        p = os.path.join(d, f)
                        tf.add(p, arcname=os.path.relpath(p, root), recursive=False, filter=norm)
                    for x in dirs:
                        p = os.path.join(d, x)
                        if not os.path.islink(p):
                            tf.add(p, arcname=os.path.relpath(p, root), recursive=False, filter=norm)
    digest = "sha256:" + hashlib.sha256(open(path, "rb").read()).hexdigest()
    packed[root] = (name, digest)
    return packed[root]

rows = []
for corpus in corpora:
    if not os.path.isdir(corpus):
        print(f"bench-buildtime: no corpus at {corpus}, skipped", file=sys.stderr)
        continue
    cases = []
    for repo in sorted(os.listdir(corpus)):
        for case in sorted(os.listdir(os.path.join(corpus, repo))):
            toml = os.path.join(corpus, repo, case, "case.toml")
            if not os.path.isfile(toml):
                continue
            with open(toml, "rb") as f:
                c = tomllib.load(f)
            cases.append((c.get("output_bytes", 0), f"{repo}/{case}", os.path.join(corpus, repo, case), c))
    cases.sort(key=lambda t: (-t[0], t[1]))
    for size, name, cdir, c in cases[:n]:
        art, dg = pack(os.path.join(cdir, c["input"]))
        rows.append([name, art, dg, c.get("kustomization_dir", "."), c.get("load_restrictor", "rootOnly"),
                     str(c.get("object_count", "")), str(size)])
with open(os.path.join(work, "cases.tsv"), "w") as f:
    for r in rows:
        f.write("\t".join(r) + "\n")
print(f"bench-buildtime: {len(rows)} cases, {len(packed)} artifacts", file=sys.stderr)
PY
cp "$work/cases.tsv" "$out/buildtime.cases.tsv"
if [[ ! -s "$work/cases.tsv" ]]; then
  echo "bench-buildtime: no corpus case found" >&2
  exit 1
fi

# --- artifact server -------------------------------------------------------------------------
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$work/artifacts" >"$work/server.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 50); do
  port=$(sed -n 's/.*port \([0-9][0-9]*\).*/\1/p' "$work/server.log" | head -1)
  [[ -n "$port" ]] && break
  sleep 0.1
done
[[ -n "$port" ]] || { echo "bench-buildtime: the artifact server did not start" >&2; exit 1; }
base="http://127.0.0.1:$port"

# --- runs ------------------------------------------------------------------------------------
samples="$out/buildtime.jsonl"
errlog="$out/buildtime.stderr"  # the harnesses' stderr (kustomize's deprecation warnings, errors)
: >"$samples"
: >"$errlog"
load_before=$(cat /proc/loadavg)
for round in $(seq "$k"); do
  while IFS=$'\t' read -r name art digest kdir _lr _objs _bytes; do
    nice "$ours" --url "$base/$art" --digest "$digest" --path "$kdir" --case "$name" \
      --k 1 --warmup 1 >>"$samples" 2>>"$errlog" || echo "{\"side\":\"ours\",\"case\":\"$name\",\"error\":true}" >>"$samples"
    if [[ -n "$flux" ]]; then
      nice "$flux" -url "$base/$art" -digest "$digest" -path "$kdir" -case "$name" \
        -k 1 -warmup 1 >>"$samples" 2>>"$errlog" || echo "{\"side\":\"flux\",\"case\":\"$name\",\"error\":true}" >>"$samples"
    fi
  done <"$work/cases.tsv"
  echo "bench-buildtime: round $round/$k done" >&2
done
load_after=$(cat /proc/loadavg)
printf '%s\n%s\n' "$load_before" "$load_after" >"$out/buildtime.load"
report

