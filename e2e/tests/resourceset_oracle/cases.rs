//! Expectations of `resourceset_oracle.rs`, per case directory of
//! `tests/data/resourceset/`: what the spec (§13) says for the E cases, what each case was
//! designed to show for ours (see the README there).

use serde_json::{Value, json};

/// What a case must build.
pub(crate) struct Expect {
    /// `Kind ns/name` (or `Kind name`) of every object, in build order.
    pub(crate) objects: Vec<String>,
    /// `(object, JSON pointer, value)`: the object (see `find` in the test) has that value there.
    pub(crate) fields: Vec<(String, &'static str, Value)>,
    /// `(object, JSON pointer)`: the object has nothing there.
    pub(crate) absent: Vec<(String, &'static str)>,
}

pub(crate) fn expect(objects: &[&str]) -> Expect {
    Expect {
        objects: objects.iter().map(|s| s.to_string()).collect(),
        fields: Vec::new(),
        absent: Vec::new(),
    }
}

impl Expect {
    fn field(mut self, object: &str, pointer: &'static str, value: Value) -> Self {
        self.fields.push((object.to_string(), pointer, value));
        self
    }

    fn absent(mut self, object: &str, pointer: &'static str) -> Self {
        self.absent.push((object.to_string(), pointer));
        self
    }
}

/// Adler-32 in decimal, the id flux-operator gives input sets (checked against the spec's
/// examples in `adler32_matches_the_spec_examples`).
pub(crate) fn adler32(text: &str) -> String {
    let (mut a, mut b) = (1u32, 0u32);
    for byte in text.bytes() {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    ((b << 16) | a).to_string()
}

/// The cases that build objects (the others have `expected-error.txt`).
/// A case directory's name and its expectations.
pub(crate) type Case = (&'static str, fn() -> Expect);

pub(crate) const CASES: &[Case] = &[
    ("e1-inline-inputs", e1),
    ("e2-dedup", e2),
    ("e3-exclusion", e3),
    ("e4-resources-template", e4),
    ("e5a-toyaml-nindent", e5a),
    ("e5b-get-default", e5b),
    ("e5c-slugify", e5c),
    ("e6-multi-cluster", e6),
    ("e7-static-selector", e7),
    ("e8-permute", e8),
    ("e9-steps", e9),
    (
        "steps-resources-beat-template",
        steps_resources_beat_template,
    ),
    ("exclusion-template", exclusion_template),
    ("noinputs-no-exclusion", noinputs_no_exclusion),
    ("permute-three", permute_three),
    ("flatten-provider-order", flatten_provider_order),
    ("functions-mix", functions_mix),
    ("dedup-across", dedup_across),
    ("list-and-dropped", list_and_dropped),
    ("static-selector-filters", static_selector_filters),
    ("slugify-truncate", slugify_truncate),
    ("yaml11-keys", yaml11_keys),
    ("number-types", number_types),
    ("toyaml-quoting", toyaml_quoting),
    ("default-empty", default_empty),
    ("permute-providers-only", permute_providers_only),
    ("long-string-folding", long_string_folding),
];

const OCI_T1: &str = "OCIRepository default/podinfo-team1";
const OCI_T2: &str = "OCIRepository default/podinfo-team2";
const HR_T1: &str = "HelmRelease default/podinfo-team1";
const HR_T2: &str = "HelmRelease default/podinfo-team2";

fn e1() -> Expect {
    let mut e = expect(&[OCI_T1, OCI_T2, HR_T1, HR_T2])
        .field(OCI_T1, "/spec/ref/semver", json!("6.7.x"))
        .field(OCI_T2, "/spec/ref/semver", json!("6.6.x"))
        .field(HR_T1, "/spec/values/replicaCount", json!(2))
        .field(HR_T2, "/spec/values/replicaCount", json!(3))
        .field(HR_T2, "/spec/releaseName", json!("podinfo-team2"))
        .field(
            HR_T2,
            "/spec/chartRef",
            json!({"kind": "OCIRepository", "name": "podinfo-team2"}),
        );
    for o in [OCI_T1, OCI_T2, HR_T1, HR_T2] {
        e = e.field(
            o,
            "/metadata/labels/app.kubernetes.io~1name",
            json!("podinfo"),
        );
    }
    e
}

fn e2() -> Expect {
    let oci = "OCIRepository default/podinfo";
    expect(&[oci, HR_T1, HR_T2])
        .field(oci, "/spec/ref/semver", json!("*"))
        .field(HR_T1, "/spec/chartRef/name", json!("podinfo"))
        .field(HR_T1, "/spec/values/replicaCount", json!(2))
        .field(HR_T2, "/spec/values/replicaCount", json!(3))
}

fn e3() -> Expect {
    let sa = "ServiceAccount team1/flux";
    expect(&["Namespace team1", "Namespace team2", sa]).field(
        sa,
        "/metadata/annotations/fluxcd.controlplane.io~1reconcile",
        json!("enabled"),
    )
}

fn e4() -> Expect {
    let ks = |n: &str| format!("Kustomization flux-system/{n}");
    let mut e = expect(&[
        "OCIRepository flux-system/addons",
        &ks("ingress-nginx"),
        &ks("cert-manager"),
        "OCIRepository flux-system/apps",
        &ks("frontend"),
        &ks("backend"),
    ])
    .field(
        "OCIRepository flux-system/addons",
        "/spec/url",
        json!("oci://registry.example.com/addons"),
    )
    .field(
        "OCIRepository flux-system/addons",
        "/spec/interval",
        json!("10m"),
    )
    .field(&ks("ingress-nginx"), "/spec/path", json!("./ingress-nginx"))
    .field(
        &ks("ingress-nginx"),
        "/spec/sourceRef",
        json!({"kind": "OCIRepository", "name": "addons"}),
    )
    .field(&ks("ingress-nginx"), "/spec/prune", json!(true))
    .field(&ks("ingress-nginx"), "/spec/interval", json!("1h"))
    .field(&ks("backend"), "/spec/sourceRef/name", json!("apps"));
    for n in ["ingress-nginx", "cert-manager"] {
        e = e.absent(&ks(n), "/spec/decryption");
    }
    for n in ["frontend", "backend"] {
        e = e.field(
            &ks(n),
            "/spec/decryption",
            json!({"provider": "sops", "secretRef": {"name": "apps-sops"}}),
        );
    }
    e
}

fn e5a() -> Expect {
    let oci = "OCIRepository default/team1";
    expect(&[oci]).field(
        oci,
        "/spec/layerSelector",
        json!({"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "operation": "copy"}),
    )
}

fn e5b() -> Expect {
    expect(&["OCIRepository team1/team1"])
}

fn e5c() -> Expect {
    let (rc, stable) = ("ConfigMap default/app-rc", "ConfigMap default/app-stable");
    expect(&[rc, stable])
        .field(
            rc,
            "/metadata/labels/app.kubernetes.io~1version",
            json!("1-0-0-rc-0"),
        )
        .field(
            stable,
            "/metadata/labels/app.kubernetes.io~1version",
            json!("1-0-0"),
        )
        .field(rc, "/data/semver", json!(">=1.0.0-rc.0"))
}

fn e6() -> Expect {
    let (gd, gp) = (
        "GitRepository apps/app1-dev",
        "GitRepository apps/app1-production",
    );
    let (kd, kp) = (
        "Kustomization apps/app1-dev",
        "Kustomization apps/app1-production",
    );
    expect(&[gd, gp, kd, kp])
        .field(gd, "/spec/ref/branch", json!("main"))
        .field(gp, "/spec/ref/branch", json!("prod"))
        .field(gd, "/spec/url", json!("https://my.git/org/app1-deploy"))
        .field(
            kd,
            "/spec/postBuild/substitute/domain",
            json!("app1.dev.example.com"),
        )
        .field(
            kp,
            "/spec/postBuild/substitute/domain",
            json!("app1.example.com"),
        )
        .field(
            kd,
            "/spec/kubeConfig/secretRef/name",
            json!("dev-kubeconfig"),
        )
        .field(
            kp,
            "/spec/kubeConfig/secretRef/name",
            json!("production-kubeconfig"),
        )
        .field(
            kp,
            "/spec/sourceRef",
            json!({"kind": "GitRepository", "name": "app1-production"}),
        )
}

fn e7() -> Expect {
    let (o1, o2) = (
        "OCIRepository apps/app1-tenant1",
        "OCIRepository apps/app1-tenant2",
    );
    let (h1, h2) = (
        "HelmRelease apps/app1-tenant1",
        "HelmRelease apps/app1-tenant2",
    );
    expect(&[o1, o2, h1, h2])
        .field(o1, "/spec/ref/semver", json!("6.7.x"))
        .field(o2, "/spec/ref/semver", json!("6.6.x"))
        .field(o1, "/spec/url", json!("oci://my.registry/org/charts/app1"))
        .field(h1, "/spec/values/replicaCount", json!(2))
        .field(h2, "/spec/values/replicaCount", json!(3))
}

fn e8() -> Expect {
    let cm = |i: usize| {
        format!(
            "ConfigMap default/my-cm-{}",
            adler32(&format!("my_rset={i}/git_tag=0/oci_tag=0"))
        )
    };
    let (c0, c1) = (cm(0), cm(1));
    // The spec's values for these two names.
    assert_eq!(c0, "ConfigMap default/my-cm-2714045022");
    assert_eq!(c1, "ConfigMap default/my-cm-2715421279");
    let sha = "bf5d6e01cf802734853f6f3417b237e3ad0ba35d";
    let digest = "sha256:d4ec9861522d4961b2acac5a070ef4f92d732480dff2062c2f3a1dcf9a5d1e91";
    let mut e = expect(&[&c0, &c1])
        .field(&c0, "/data/rsetID", json!("id1"))
        .field(&c0, "/data/someField", json!("foo"))
        .field(&c1, "/data/rsetID", json!("id2"))
        .field(&c1, "/data/someField", json!("bar"));
    for c in [&c0, &c1] {
        // In the CLI a Static provider's id is the Adler-32 of its name (of its uid in a cluster).
        e = e
            .field(c, "/data/rsipGitID", json!(adler32("git-tag")))
            .field(c, "/data/rsipOCIID", json!(adler32("oci-tag")))
            .field(c, "/data/sha", json!(sha))
            .field(c, "/data/digest", json!(digest));
    }
    e
}

fn e9() -> Expect {
    let (job, ks) = ("Job apps/db-migration", "Kustomization apps/app-deploy");
    expect(&[job, ks])
        .field(
            job,
            "/spec/template/spec/containers/0/image",
            json!("ghcr.io/org/my-app:v1.0.0"),
        )
        .field(job, "/spec/template/spec/restartPolicy", json!("Never"))
        .field(
            job,
            "/metadata/annotations/fluxcd.controlplane.io~1force",
            json!("enabled"),
        )
        .field(
            job,
            "/metadata/annotations/fluxcd.controlplane.io~1recreateOnFailure",
            json!("enabled"),
        )
        .field(
            ks,
            "/spec/images",
            json!([{"name": "ghcr.io/org/my-app", "newTag": "v1.0.0"}]),
        )
        .field(
            ks,
            "/spec/sourceRef",
            json!({"kind": "GitRepository", "name": "apps"}),
        )
        .field(ks, "/spec/path", json!("./deploy/my-app"))
        .field(ks, "/spec/wait", json!(true))
        .field(ks, "/spec/timeout", json!("9m"))
}

fn steps_resources_beat_template() -> Expect {
    let config = "ConfigMap apps/app-config";
    expect(&[
        config,
        "ConfigMap apps/app-extra",
        "ConfigMap apps/app-deploy-staging",
    ])
    .field(
        config,
        "/data",
        json!({"source": "resources", "env": "staging"}),
    )
    .field(
        "ConfigMap apps/app-extra",
        "/data/source",
        json!("template"),
    )
}

fn exclusion_template() -> Expect {
    let c = |n: &str| format!("ConfigMap default/{n}");
    expect(&[
        &c("cfg-a"),
        &c("caps-a"),
        &c("label-a"),
        &c("caps-b"),
        &c("label-b"),
    ])
    .field(
        &c("caps-b"),
        "/metadata/annotations/fluxcd.controlplane.io~1reconcile",
        json!("Disabled"),
    )
    .field(
        &c("label-b"),
        "/metadata/labels/fluxcd.controlplane.io~1reconcile",
        json!("disabled"),
    )
}

fn noinputs_no_exclusion() -> Expect {
    let s = "ConfigMap default/static";
    expect(&[s, s, "ConfigMap default/tmpl-kept"])
        .field(s, "/data/seq", json!("1"))
        .field(
            s,
            "/metadata/annotations/fluxcd.controlplane.io~1reconcile",
            json!("disabled"),
        )
        .field("ConfigMap default/static#1", "/data/seq", json!("2"))
        .field("ConfigMap default/tmpl-kept", "/data/sum", json!("3"))
}

fn permute_three() -> Expect {
    let names: Vec<String> = (0..3)
        .map(|i| {
            let id = adler32(&format!("team_apps_v2={i}/alpha_src=0/zeta_src=0"));
            format!("ConfigMap default/perm-{id}")
        })
        .collect();
    let mut e = expect(&names.iter().map(String::as_str).collect::<Vec<_>>());
    for (name, env) in names.iter().zip(["dev", "stage", "prod"]) {
        e = e.field(
            name,
            "/data",
            json!({
                "env": env, "region": "eu", "zone": "z1",
                "alphaID": adler32("alpha-src"), "zetaID": adler32("zeta-src"),
                "rsetKind": "ResourceSet", "alphaKind": "ResourceSetInputProvider",
            }),
        );
    }
    e
}

fn flatten_provider_order() -> Expect {
    let provider = |kind: &str, name: &str, id: &str| {
        json!({
            "id": id, "providerKind": kind, "providerName": name,
            "providerNamespace": "default", "providerAPIVersion": "fluxcd.controlplane.io/v1",
        })
    };
    let (i, a, z) = (
        "ConfigMap default/order-inline",
        "ConfigMap default/order-alpha",
        "ConfigMap default/order-zeta",
    );
    expect(&[i, a, z])
        .field(i, "/data", provider("ResourceSet", "ordered", "none"))
        .field(
            a,
            "/data",
            provider(
                "ResourceSetInputProvider",
                "alpha-src",
                &adler32("alpha-src"),
            ),
        )
        .field(
            z,
            "/data",
            provider("ResourceSetInputProvider", "zeta-src", &adler32("zeta-src")),
        )
}

fn functions_mix() -> Expect {
    let (cw, dw) = ("ConfigMap default/fn-web", "Deployment default/web");
    let (ck, dk) = ("ConfigMap default/fn-worker", "Deployment default/worker");
    expect(&[cw, dw, ck, dk])
        .field(
            cw,
            "/metadata/labels/label.example.com~1team",
            json!("blue"),
        )
        .field(cw, "/metadata/labels/label.example.com~1zone", json!("a"))
        .field(ck, "/metadata/labels/label.example.com~1team", json!("red"))
        .absent(ck, "/metadata/labels/label.example.com~1zone")
        .field(
            cw,
            "/data",
            json!({
                "replicas": "3", "ratio": "0.5", "enabled": "true", "mode": "on",
                "tier": "frontend", "slug": "hello-world-and-friends-at-home", "upper": "WEB",
                "next": "4", "labels": "{\"team\":\"blue\",\"zone\":\"a\"}",
            }),
        )
        .field(
            ck,
            "/data",
            json!({
                "replicas": "1", "ratio": "1.25", "enabled": "false", "mode": "off",
                "tier": "backend", "slug": "unicode-worker", "upper": "WORKER",
                "next": "2", "labels": "{\"team\":\"red\"}",
            }),
        )
        .field(dw, "/spec/replicas", json!(3))
        .field(
            dw,
            "/spec/template/spec/containers/0/resources",
            json!({"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m"}}),
        )
        .field(
            dk,
            "/spec/template/spec/containers/0/resources",
            json!({"limits": {"memory": "64Mi"}}),
        )
}

fn dedup_across() -> Expect {
    let shared = "ConfigMap default/shared";
    let web = "Deployment default/web";
    expect(&[
        shared,
        "ConfigMap default/per-t1",
        web,
        "Secret default/shared",
        "ConfigMap other/shared",
        "ConfigMap default/per-t2",
    ])
    .field(
        shared,
        "/data",
        json!({"source": "resources", "first": "t1"}),
    )
    .field(web, "/apiVersion", json!("apps/v1"))
    .field(web, "/metadata/annotations/rendered-for", json!("t1"))
    .field(
        "Secret default/shared",
        "/metadata/annotations/rendered-for",
        json!("t1"),
    )
    .field(
        "ConfigMap other/shared",
        "/data/source",
        json!("template-other-namespace"),
    )
}

fn list_and_dropped() -> Expect {
    expect(&[
        "ConfigMap default/list-a",
        "ConfigMap default/list-b",
        "ConfigMap default/kept",
    ])
}

fn static_selector_filters() -> Expect {
    let (four, one) = ("ConfigMap apps/sel-p-four", "ConfigMap apps/sel-p-one");
    expect(&[four, one])
        .field(
            four,
            "/data",
            json!({"id": adler32("p-four"), "color": "blue-four"}),
        )
        .field(
            one,
            "/data",
            json!({"id": adler32("p-one"), "color": "blue-one"}),
        )
}

fn slugify_truncate() -> Expect {
    let s = |n: &str| format!("ConfigMap default/slug-{n}");
    let alphabet = "abcdefghijklmnopqrstuvwxyz".repeat(3);
    expect(&[&s("long"), &s("symbols"), &s("oneword"), &s("nodash")])
        .field(
            &s("long"),
            "/data/slug",
            json!("the-quick-brown-fox-jumps-over-the-lazy-dog-while-the-cat"),
        )
        .field(
            &s("symbols"),
            "/data/slug",
            json!("randd-at-zurich-v2-0_beta"),
        )
        .field(
            &s("oneword"),
            "/data/slug",
            json!("supercalifragilisticexpialidocious"),
        )
        .field(&s("nodash"), "/data/slug", json!(alphabet[..63]))
}

fn yaml11_keys() -> Expect {
    let (r, t) = (
        "ConfigMap default/yaml11-resources",
        "ConfigMap default/yaml11-template",
    );
    expect(&[r, t])
        .field(
            r,
            "/data",
            json!({"false": "a", "true": "b", "quoted": "yes", "flag": true}),
        )
        .field(
            t,
            "/data",
            json!({"true": "team1", "false": "c", "flag": false}),
        )
}

fn number_types() -> Expect {
    let cm = "ConfigMap default/numbers";
    expect(&[cm]).field(
        cm,
        "/data",
        json!({
            "whole": "3", "float": "1.5", "floatWhole": "2", "big": "12345678901234",
            "negative": "-7", "wholeType": "int64", "floatType": "float64",
            "floatWholeType": "int64", "floatAsInt": "1", "sum": "-4", "isThree": "true",
            "bigger": "true", "printf": "3-1.5",
        }),
    )
}

fn toyaml_quoting() -> Expect {
    let cm = "ConfigMap default/quoting";
    expect(&[cm]).field(
        cm,
        "/data",
        json!({
            "yes": "yes", "on": "on", "number": "123", "float": "1.0", "exp": "1e3",
            "hex": "0x1F", "octal": "0755", "null": "null", "tilde": "~", "empty": "",
            "colon": "a: b", "hash": "# not a comment", "multiline": "line1\nline2\n",
            "leading": " spaced",
        }),
    )
}

fn default_empty() -> Expect {
    let cm = "ConfigMap default/defaults";
    expect(&[cm]).field(
        cm,
        "/data",
        json!({
            "emptyString": "d", "zero": "d", "no": "d", "emptyList": "d", "emptyMap": "d",
            "set": "value", "missingGet": "d", "missingIndex": "d", "isEmpty": "true",
            "coalesce": "value", "ternary": "yes-branch",
            "keys": "emptyList,emptyMap,emptyString,list,no,provider,set,zero",
            "count": "3", "sorted": "a,b,c", "andOr": "fallback",
        }),
    )
}

fn permute_providers_only() -> Expect {
    // Providers in name order (region-src before version-src); no ResourceSet scope.
    let cm = format!(
        "ConfigMap default/pp-{}",
        adler32("region_src=0/version_src=0")
    );
    expect(&[&cm]).field(
        &cm,
        "/data",
        json!({"region": "eu-west-1", "version": "1.2.3", "keys": "id,region_src,version_src"}),
    )
}

fn long_string_folding() -> Expect {
    let cm = "ConfigMap default/folding-team1";
    expect(&[cm])
        .field(
            cm,
            "/metadata/annotations/description",
            json!(
                "This ConfigMap belongs to tenant team1 and is owned by the PLATFORM-ENGINEERING \
                 team, which keeps it up to date for everyone"
            ),
        )
        .field(
            cm,
            "/data/long",
            json!(
                "word1 word2 word3 word4 word5 word6 word7 word8 word9 word10 word11 word12 \
                 word13 team1 word14 word15 word16 word17 word18 word19 word20"
            ),
        )
}
