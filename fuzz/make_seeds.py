#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz targets (fuzz/seeds/<target>/).

Every seed is made here from scratch: small YAML documents, pkt-line streams, a pack made by
`git pack-objects` from a two-commit repository created on the spot, tarballs of a few files,
and pseudo-random bytes (fixed seed) for the `arbitrary`-driven targets. Run it from anywhere;
it rewrites its own seeds and leaves the others (inputs picked from fuzzing runs) alone.
"""
import gzip, io, os, random, subprocess, tarfile, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "seeds")


def put(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def pkt(s):
    b = s if isinstance(s, bytes) else s.encode()
    return b"%04x" % (len(b) + 4) + b


FLUSH, DELIM, END = b"0000", b"0001", b"0002"
OID = "a" * 40
OID2 = "0123456789abcdef0123456789abcdef01234567"


def yaml_seeds():
    put("yaml", "kustomization", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "namePrefix: dev-\nresources:\n- deploy.yaml\n- ../base\nlabels:\n- pairs:\n    app: web\n"
        "  includeSelectors: true\nconfigMapGenerator:\n- name: cfg\n  literals:\n  - A=1\n")
    put("yaml", "deployment", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"
        "  labels: {app: web, tier: \"1\"}\nspec:\n  replicas: 3\n  template:\n    spec:\n"
        "      containers:\n      - name: app\n        image: nginx:1.25\n        args: [\"--a=1\", '--b', -c]\n")
    put("yaml", "multidoc-anchors", "a: &x {k: [1, 2.5, -3e4, .inf, ~, true, yes, 0x1F, 012]}\nb: *x\n"
        "---\n- &y text\n- *y\n- !!str 42\n- !!binary aGVsbG8=\n...\n---\n# only a comment\n")
    put("yaml", "scalars", "lit: |\n  line 1\n   line 2\nfold: >-\n  folded\n  text\nq1: 'it''s'\n"
        "q2: \"tab\\t\\u00e9\\n\"\nempty:\nnull_key: null\n? complex\n: value\ndate: 2024-01-02\n"
        "\"quoted key\": \"---\"\nnum_str: \"010\"\nstar: '*'\n")
    put("yaml", "flow", "{a: [b, {c: d}], e: [], f: {}, 'g h': [[1], [2, [3]]]}\n")


def pktline_seeds():
    put("git_pktline", "lines", pkt("hello\n") + pkt("world") + FLUSH + DELIM + END)
    put("git_pktline", "truncated", pkt("abc") + b"00ffshort")
    put("git_pktline", "binary", pkt(b"\x01PACK\x00\x00\x00\x02") + pkt(b"\x02progress\n") + FLUSH)


def protocol_seeds():
    adv = pkt("# service=git-upload-pack\n") + FLUSH
    adv += pkt(f"{OID} HEAD\0multi_ack side-band-64k ofs-delta shallow symref=HEAD:refs/heads/main object-format=sha1\n")
    adv += pkt(f"{OID} refs/heads/main\n") + pkt(f"{OID2} refs/tags/v1\n") + pkt(f"{OID} refs/tags/v1^{{}}\n") + FLUSH
    put("git_protocol", "v0-advertisement", b"\x00" + adv)
    v2 = pkt("version 2\n") + pkt("agent=git/2.39\n") + pkt("ls-refs=unborn\n") + pkt("fetch=shallow\n") + pkt("object-format=sha1\n") + FLUSH
    put("git_protocol", "v2-capabilities", b"\x00" + v2)
    ls = pkt(f"{OID} HEAD symref-target:refs/heads/main\n") + pkt(f"{OID2} refs/tags/v1 peeled:{OID}\n") + pkt("unborn HEAD\n") + FLUSH
    put("git_protocol", "ls-refs", b"\x01" + ls)
    pack = b"PACK\x00\x00\x00\x02\x00\x00\x00\x00" + bytes(20)
    f2 = pkt("shallow-info\n") + pkt(f"shallow {OID}\n") + DELIM + pkt("packfile\n")
    f2 += pkt(b"\x02Enumerating objects\n") + pkt(b"\x01" + pack) + FLUSH
    put("git_protocol", "fetch-v2", b"\x02" + f2)
    f0 = pkt(f"shallow {OID}\n") + pkt("NAK\n") + pkt(b"\x01" + pack) + pkt(b"\x03fatal: nope\n") + FLUSH
    put("git_protocol", "fetch-v0-sideband", b"\x03" + f0)
    put("git_protocol", "fetch-v0-raw", b"\x04" + pkt(f"ACK {OID}\n") + pack)
    put("git_protocol", "error", b"\x00" + pkt("ERR access denied\n"))


def pack_seeds():
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, GIT_AUTHOR_NAME="fuzz", GIT_AUTHOR_EMAIL="f@example.com",
                   GIT_COMMITTER_NAME="fuzz", GIT_COMMITTER_EMAIL="f@example.com",
                   GIT_AUTHOR_DATE="2024-01-01T00:00:00Z", GIT_COMMITTER_DATE="2024-01-01T00:00:00Z")
        run = lambda *a: subprocess.run(["git", "-C", d, *a], check=True, env=env, capture_output=True).stdout
        run("init", "-q", "-b", "main")
        os.makedirs(os.path.join(d, "app"))
        body = "".join(f"line {i}: some configuration text\n" for i in range(60))
        open(os.path.join(d, "app", "config.yaml"), "w").write(body)
        open(os.path.join(d, ".gitmodules"), "w").write('[submodule "lib"]\n\tpath = lib\n\turl = ../lib.git\n')
        run("add", "-A"); run("commit", "-q", "-m", "one")
        open(os.path.join(d, "app", "config.yaml"), "w").write(body.replace("line 30", "LINE 30"))
        run("commit", "-q", "-am", "two"); run("tag", "-a", "-m", "tag", "v1")
        revs = run("rev-list", "--objects", "--all").decode()
        ids = "".join(line.split(" ")[0] + "\n" for line in revs.splitlines()) + run("rev-parse", "v1").decode()
        for name, extra in (("ofs-delta", ["--delta-base-offset"]), ("ref-delta", [])):
            p = subprocess.run(["git", "-C", d, "pack-objects", "--stdout", "-q", *extra], input=ids.encode(),
                               check=True, env=env, capture_output=True).stdout
            put("git_pack", name, p[:-20])  # the target appends the SHA-1 trailer itself
        p = subprocess.run(["git", "-C", d, "pack-objects", "--stdout", "-q", "--revs", "--window=0"],
                           input=b"HEAD\n", check=True, env=env, capture_output=True).stdout
        put("git_pack", "one-commit", p[:-20])


def tarball(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind, data in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1700000000
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            elif kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, data
                tf.addfile(ti)
            else:
                ti.size, ti.mode = len(data), 0o644
                tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def untar_seeds():
    t = tarball([("app", "dir", None), ("app/kustomization.yaml", "file", b"resources:\n- cm.yaml\n"),
                 ("app/cm.yaml", "file", b"kind: ConfigMap\n"), ("app/link", "sym", "../../etc/passwd"),
                 ("./app/sub/../x.yaml", "file", b"x")])
    put("untar", "tar-plain", b"\x00" + t)
    put("untar", "tar-gz", b"\x01" + gzip.compress(tarball([("a/b/c.txt", "file", b"hello" * 20)]), mtime=0))
    long = "d/" * 60 + "f.yaml"
    put("untar", "tar-long-name", b"\x00" + tarball([(long, "file", b"long"), ("../escape", "file", b"no")]))


def random_seeds(target, sizes):
    rng = random.Random(14)
    for i, n in enumerate(sizes):
        put(target, f"random-{i}", bytes(rng.randrange(256) for _ in range(n)))


def substitute_seeds():
    random_seeds("substitute", [64, 256, 1024])
    # Texts with the operators up front (the first field is the free text).
    for i, text in enumerate(["replicas: ${replicas:=3} ${name^^} ${#name} ${name:1:2}",
                              "${a//x/y} ${a/#p/r} ${a%%.*} ${a##*/} $${literal} $$ ${b:-${c:-d}}"]):
        put("substitute", f"operators-{i}", text.encode() + bytes([7, 0, 0, 0]) * 8 + b"replicas\x0803name\x04web")


def sops_seeds():
    # The first byte picks the format (0 YAML, 1 JSON, 2 dotenv, 3 INI, 4 binary) and, divided
    # by 5, the encryption rule. The ENC values are made up: they load but do not decrypt.
    enc = "ENC[AES256_GCM,data:dGVzdA==,iv:" + "A" * 43 + "=,tag:" + "B" * 22 + "==,type:str]"
    block = ("sops:\n    age:\n        - recipient: age1x\n          enc: x\n"
             "    lastmodified: \"2026-12-01T00:00:00Z\"\n    mac: " + enc + "\n    version: 3.13.3\n")
    put("sops", "yaml-secret", bytes([0]) + ("# a comment\napiVersion: v1\nkind: Secret # line\n"
        "metadata:\n    name: db\nstringData:\n    password: " + enc + "\n    list:\n        - a\n"
        "        # inside\n        - {k: v}\n    when: 2024-01-01\n    n: 0x1F\n    f: 1.5e3\n" + block).encode())
    put("sops", "yaml-multidoc", bytes([5]) + b"a: &x [1, 2]\nb: *x\n---\nc: |\n    text\n    more\nd: 'q''s'\n---\n{e: [], f: {}}\n")
    put("sops", "json", bytes([1]) + ('{"data": {"k": "' + enc + '", "n": 1e400, "i": -9223372036854775808, '
        '"u": "\\u00e9<&>"}, "sops": {"age": [{"recipient": "age1x", "enc": "x"}], '
        '"lastmodified": "2026-12-01T00:00:00Z", "mac": "' + enc + '"}}').encode())
    put("sops", "dotenv", bytes([2]) + ("#comment\nA=" + enc + "\nB_unencrypted=plain\nsops_age__list_0__map_enc=x\n"
        "sops_age__list_0__map_recipient=age1x\nsops_lastmodified=2026-12-01T00:00:00Z\nsops_mac=" + enc + "\n").encode())
    put("sops", "ini", bytes([3]) + ("; top\n[db]\nuser = " + enc + "\n# note\npass = x\n\n[sops]\n"
        "age__list_0__map_enc = x\nage__list_0__map_recipient = age1x\nlastmodified = 2026-12-01T00:00:00Z\nmac = " + enc + "\n").encode())
    put("sops", "binary", bytes([4]) + ('{"data": "' + enc + '", "sops": {"age": [{"recipient": "age1x", "enc": "x"}], '
        '"lastmodified": "2026-12-01T00:00:00Z", "mac": "' + enc + '"}}').encode())


if __name__ == "__main__":
    sops_seeds()
    yaml_seeds(); pktline_seeds(); protocol_seeds(); pack_seeds(); untar_seeds()
    random_seeds("kustomize_build", [256, 512, 1024, 2048, 4096, 8192])
    substitute_seeds()
