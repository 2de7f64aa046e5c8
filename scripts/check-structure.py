#!/usr/bin/env python3
"""Structure checks run by `make lint`:

1. no import circle between the source files of one crate: a file's references to other
   modules of its crate (`use crate::…`, `use super::…`, inline `crate::a::b` paths) are
   edges, `mod x;` declarations are not; a cycle of edges is an error;
2. no source file over 800 lines (`src/`, `tests/`, `benches/`, `examples/`), except the data
   tables listed in ALLOWED_LONG.

Prints what it found; exits 1 on a violation. `--report` prints the largest files and the
cycles without failing (for the closing figures of a change).
"""
import os
import re
import sys

MAX_LINES = 800
# Tables of data, not logic.
ALLOWED_LONG = set()
CRATES = ["core", "common", "kustomize", "git", "source-controller", "kustomize-controller",
          "e2e", "bench", "sops", "oci", "ssa", "gotmpl", "resourceset-controller"]

USE_RE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M | re.S)
INLINE_RE = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
# `child::item` in code, where `child` is a submodule of the file's module.
CHILD_RE = re.compile(r"(?<![:\w])([a-z_][a-z0-9_]*)::[A-Za-z_]")


def module_files(src):
    """Maps module paths (tuples) to files under a crate's src/."""
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            if rel and rel[0] == "bin":
                continue
            mods[tuple(rel)] = path
    return mods


def strip_comments(text):
    # Unit tests (by convention a `#[cfg(test)] mod tests` at the end of the file) are left
    # out: their `super` is the file itself.
    cut = re.search(r"^#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+\w+\s*\{", text, re.M)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def expand_use(tree):
    """`a::{b, c::{d}}` -> ["a::b", "a::c::d"]."""
    tree = tree.strip()
    i = tree.find("{")
    if i < 0:
        return [tree.split(" as ")[0].strip()]
    prefix = tree[:i]
    inner = tree[i + 1: tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            out.extend(prefix + x for x in expand_use(p))
    return out


def resolve(mods, here, path):
    """The module file a `crate::…`/`super::…`/`self::…` path points into."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    segs0 = segs[0]
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = list(here)
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
        base, rest = tuple(base), segs
    else:
        return None
    best = base if base in mods else None
    if segs0 == "self" and best == base and rest and base + (rest[0],) not in mods:
        # `use child::X` where child is not a module file: an extern crate or an item.
        return None
    cur = base
    for s in rest:
        cur = cur + (s,)
        if cur in mods:
            best = cur
        else:
            break
    return best


def reexports_of(mods):
    """`pub use` re-exports per module: name -> the full path it re-exports."""
    out = {}
    for mod, path in mods.items():
        text = strip_comments(open(path, encoding="utf-8").read())
        names = {}
        for m in USE_RE.finditer(text):
            if not m.group(1):
                continue
            for p in expand_use(m.group(2)):
                if not p.startswith(("crate::", "super::", "self::")):
                    p = "self::" + p
                name = p.split("::")[-1]
                if " as " in m.group(2):
                    continue
                names[name] = p
        out[mod] = names
    return out


def resolve_through(mods, reexports, here, path, depth=0):
    """Like `resolve`, but a name re-exported by a facade module (a `pub use` in a `mod.rs` or
    `lib.rs`) resolves to the module that defines it."""
    t = resolve(mods, here, path)
    if t is None or depth > 4:
        return t
    segs = [x for x in path.split("::") if x]
    # the segment after the resolved module
    name = None
    base = list(here)
    rest = segs
    if segs[0] == "crate":
        base, rest = [], segs[1:]
    else:
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    consumed = len(t) - len(base)
    if 0 <= consumed < len(rest):
        name = rest[consumed]
    target = reexports.get(t, {}).get(name) if name else None
    if target is None:
        return t
    return resolve_through(mods, reexports, t, target, depth + 1) or t


def edges_of(mods):
    reexports = reexports_of(mods)
    edges = {}
    for mod, path in mods.items():
        text = strip_comments(open(path, encoding="utf-8").read())
        here = mod
        targets = set()
        for m in USE_RE.finditer(text):
            if m.group(1):
                # A re-export makes this module a facade of the other; it is not a use.
                continue
            for p in expand_use(m.group(2)):
                if not p.startswith(("crate::", "super::", "self::")):
                    # A path relative to this module: `use child::X`.
                    p = "self::" + p
                t = resolve_through(mods, reexports, here, p)
                if t is not None and t != mod:
                    targets.add(t)
        code = USE_RE.sub("", text)
        for m in INLINE_RE.finditer(code):
            t = resolve_through(mods, reexports, here, m.group(1) + m.group(2))
            if t is not None and t != mod:
                targets.add(t)
        for m in CHILD_RE.finditer(code):
            child = here + (m.group(1),)
            if child in mods and child != mod:
                targets.add(child)
        edges[mod] = targets
    return edges


def cycles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def main():
    report = "--report" in sys.argv
    root = os.environ.get("ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = False
    longest = []
    for crate in CRATES:
        src = os.path.join(root, crate, "src")
        if not os.path.isdir(src):
            continue
        mods = module_files(src)
        for comp in cycles(edges_of(mods)):
            names = sorted(os.path.relpath(mods[m], root) for m in comp)
            print(f"import circle in {crate}: {' <-> '.join(names)}")
            bad = True
        others = []
        for sub in ("tests", "benches", "examples"):
            for r, _, files in os.walk(os.path.join(root, crate, sub)):
                others.extend(os.path.join(r, f) for f in files if f.endswith(".rs"))
        for path in list(mods.values()) + others:
            n = sum(1 for _ in open(path, encoding="utf-8"))
            rel = os.path.relpath(path, root)
            longest.append((n, rel))
            if n > MAX_LINES and rel not in ALLOWED_LONG:
                print(f"{rel}: {n} lines (more than {MAX_LINES})")
                bad = True
    if report:
        for n, rel in sorted(longest, reverse=True)[:10]:
            print(f"{n:6} {rel}")
        return 0
    if not bad:
        print("structure: no import circles, no source file over "
              f"{MAX_LINES} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
