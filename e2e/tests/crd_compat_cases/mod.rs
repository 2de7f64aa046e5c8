//! The objects `crd_compat.rs` creates: the [`Kind`]s it covers, the [`Case`] type and the
//! list of invalid (and a few valid edge-case) objects, [`edge_cases`].
#![allow(clippy::unwrap_used)]

use kube::api::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

pub const GIT_API: &str = "source.toolkit.fluxcd.io/v1";
pub const KS_API: &str = "kustomize.toolkit.fluxcd.io/v1";
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Git,
    Ks,
}

impl Kind {
    pub fn of(obj: &Value) -> Option<Kind> {
        match (obj["apiVersion"].as_str()?, obj["kind"].as_str()?) {
            (GIT_API, "GitRepository") => Some(Kind::Git),
            (KS_API, "Kustomization") => Some(Kind::Ks),
            _ => None,
        }
    }

    pub fn api_resource(self) -> ApiResource {
        let gvk = match self {
            Kind::Git => GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "GitRepository"),
            Kind::Ks => GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        };
        let plural = match self {
            Kind::Git => "gitrepositories",
            Kind::Ks => "kustomizations",
        };
        ApiResource::from_gvk_with_plural(&gvk, plural)
    }
}

/// One object to create. `expect_rejected` is checked under Flux's CRDs too, so
/// the list itself is validated (samples must all be accepted).
pub struct Case {
    pub name: String,
    pub kind: Kind,
    pub object: Value,
    pub expect_rejected: bool,
}

pub fn case(name: &str, kind: Kind, spec: Value, expect_rejected: bool) -> Case {
    let (api, k) = match kind {
        Kind::Git => (GIT_API, "GitRepository"),
        Kind::Ks => (KS_API, "Kustomization"),
    };
    Case {
        name: name.to_string(),
        kind,
        object: json!({"apiVersion": api, "kind": k, "metadata": {"name": name}, "spec": spec}),
        expect_rejected,
    }
}
/// Invalid objects (each breaks one rule of the schema) and valid edge cases.
pub fn edge_cases() -> Vec<Case> {
    use Kind::{Git, Ks};
    let git = |extra: Value| {
        let mut spec = json!({"url": "https://example.com/org/repo", "interval": "5m"});
        merge(&mut spec, extra);
        spec
    };
    let ks = |extra: Value| {
        let mut spec = json!({"interval": "5m", "prune": true,
                              "sourceRef": {"kind": "GitRepository", "name": "repo"}});
        merge(&mut spec, extra);
        spec
    };
    let long = |n: usize| "a".repeat(n);
    vec![
        // GitRepository: rejected
        case(
            "git-bad-interval",
            Git,
            git(json!({"interval": "5 minutes"})),
            true,
        ),
        case(
            "git-interval-days",
            Git,
            git(json!({"interval": "1d"})),
            true,
        ),
        case(
            "git-interval-number",
            Git,
            git(json!({"interval": 5})),
            true,
        ),
        case(
            "git-timeout-hours",
            Git,
            git(json!({"timeout": "1h"})),
            true,
        ),
        case(
            "git-scp-url",
            Git,
            git(json!({"url": "git@github.com:org/repo.git"})),
            true,
        ),
        case(
            "git-ftp-url",
            Git,
            git(json!({"url": "ftp://example.com/repo"})),
            true,
        ),
        case(
            "git-unknown-provider",
            Git,
            git(json!({"provider": "gitlab"})),
            true,
        ),
        case(
            "git-verify-bad-mode",
            Git,
            git(json!({"verify": {"mode": "Commit", "secretRef": {"name": "k"}}})),
            true,
        ),
        case(
            "git-verify-no-secret",
            Git,
            git(json!({"verify": {"mode": "HEAD"}})),
            true,
        ),
        case(
            "git-secretref-no-name",
            Git,
            git(json!({"secretRef": {}})),
            true,
        ),
        case("git-missing-url", Git, json!({"interval": "5m"}), true),
        case(
            "git-missing-interval",
            Git,
            json!({"url": "https://example.com/r"}),
            true,
        ),
        case(
            "git-sa-without-provider",
            Git,
            git(json!({"serviceAccountName": "sa"})),
            true,
        ),
        case(
            "git-sa-generic-provider",
            Git,
            git(json!({"serviceAccountName": "sa", "provider": "generic"})),
            true,
        ),
        case(
            "git-sa-github-provider",
            Git,
            git(json!({"serviceAccountName": "sa", "provider": "github"})),
            true,
        ),
        case(
            "git-include-no-repository",
            Git,
            git(json!({"include": [{"fromPath": "a"}]})),
            true,
        ),
        case(
            "git-suspend-string",
            Git,
            git(json!({"suspend": "yes"})),
            true,
        ),
        case(
            "git-sparse-not-list",
            Git,
            git(json!({"sparseCheckout": "deploy"})),
            true,
        ),
        // GitRepository: accepted
        case(
            "git-sa-azure",
            Git,
            git(json!({"serviceAccountName": "sa", "provider": "azure"})),
            false,
        ),
        case(
            "git-sa-aws",
            Git,
            git(json!({"serviceAccountName": "sa", "provider": "aws"})),
            false,
        ),
        case(
            "git-http-empty-ref",
            Git,
            git(json!({"url": "http://example.com/r", "ref": {}})),
            false,
        ),
        case(
            "git-ssh-verify-head",
            Git,
            git(json!({"url": "ssh://git@example.com:22/r.git",
            "verify": {"mode": "head", "secretRef": {"name": "k"}}})),
            false,
        ),
        case(
            "git-verify-default-mode",
            Git,
            git(json!({"verify": {"secretRef": {"name": "k"}}})),
            false,
        ),
        case(
            "git-fractional-timeout",
            Git,
            git(json!({"timeout": "1.5m", "interval": "1h30m"})),
            false,
        ),
        case(
            "git-all-fields",
            Git,
            git(json!({
            "secretRef": {"name": "auth"}, "provider": "github", "timeout": "90s",
            "ref": {"branch": "main", "tag": "v1", "semver": ">=1", "name": "refs/heads/main", "commit": "abc"},
            "verify": {"mode": "TagAndHEAD", "secretRef": {"name": "keys"}},
            "proxySecretRef": {"name": "proxy"}, "ignore": "/*\n!/deploy\n", "suspend": true,
            "recurseSubmodules": true, "include": [{"repository": {"name": "lib"}, "fromPath": "a", "toPath": "b"}],
            "sparseCheckout": ["deploy", "charts"]})),
            false,
        ),
        case(
            "git-unknown-field",
            Git,
            git(json!({"notAField": "x"})),
            false,
        ),
        // Kustomization: rejected
        case(
            "ks-missing-prune",
            Ks,
            json!({"interval": "5m", "sourceRef": {"kind": "GitRepository", "name": "r"}}),
            true,
        ),
        case(
            "ks-missing-source",
            Ks,
            json!({"interval": "5m", "prune": true}),
            true,
        ),
        case(
            "ks-missing-interval",
            Ks,
            json!({"prune": true, "sourceRef": {"kind": "GitRepository", "name": "r"}}),
            true,
        ),
        case(
            "ks-bad-interval",
            Ks,
            ks(json!({"interval": "often"})),
            true,
        ),
        case(
            "ks-bad-retry-interval",
            Ks,
            ks(json!({"retryInterval": "soon"})),
            true,
        ),
        case(
            "ks-bad-timeout",
            Ks,
            ks(json!({"timeout": "2 minutes"})),
            true,
        ),
        case(
            "ks-source-kind",
            Ks,
            ks(json!({"sourceRef": {"kind": "HelmRepository", "name": "r"}})),
            true,
        ),
        case(
            "ks-source-no-name",
            Ks,
            ks(json!({"sourceRef": {"kind": "GitRepository"}})),
            true,
        ),
        case(
            "ks-deletion-policy",
            Ks,
            ks(json!({"deletionPolicy": "Foreground"})),
            true,
        ),
        case(
            "ks-target-ns-empty",
            Ks,
            ks(json!({"targetNamespace": ""})),
            true,
        ),
        case(
            "ks-target-ns-long",
            Ks,
            ks(json!({"targetNamespace": long(64)})),
            true,
        ),
        case(
            "ks-prefix-long",
            Ks,
            ks(json!({"namePrefix": long(201)})),
            true,
        ),
        case("ks-suffix-empty", Ks, ks(json!({"nameSuffix": ""})), true),
        case(
            "ks-kubeconfig-both",
            Ks,
            ks(json!({"kubeConfig": {"secretRef": {"name": "a"}, "configMapRef": {"name": "b"}}})),
            true,
        ),
        case(
            "ks-kubeconfig-none",
            Ks,
            ks(json!({"kubeConfig": {}})),
            true,
        ),
        case(
            "ks-substitute-from-kind",
            Ks,
            ks(json!({"postBuild": {"substituteFrom": [{"kind": "Namespace", "name": "x"}]}})),
            true,
        ),
        case(
            "ks-substitute-from-empty-name",
            Ks,
            ks(json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": ""}]}})),
            true,
        ),
        case(
            "ks-substitute-from-long-name",
            Ks,
            ks(json!({"postBuild": {"substituteFrom": [{"kind": "Secret", "name": long(254)}]}})),
            true,
        ),
        case(
            "ks-substitute-strategy",
            Ks,
            ks(json!({"postBuild": {"substituteStrategy": "Never"}})),
            true,
        ),
        case(
            "ks-substitute-not-strings",
            Ks,
            ks(json!({"postBuild": {"substitute": {"A": 1}}})),
            true,
        ),
        case(
            "ks-decryption-provider",
            Ks,
            ks(json!({"decryption": {"provider": "vault"}})),
            true,
        ),
        case(
            "ks-decryption-no-provider",
            Ks,
            ks(json!({"decryption": {"secretRef": {"name": "s"}}})),
            true,
        ),
        case(
            "ks-build-metadata",
            Ks,
            ks(json!({"buildMetadata": ["managedByLabel"]})),
            true,
        ),
        case(
            "ks-healthcheck-no-kind",
            Ks,
            ks(json!({"healthChecks": [{"name": "web"}]})),
            true,
        ),
        case(
            "ks-healthcheck-expr-no-current",
            Ks,
            ks(json!({"healthCheckExprs": [{"apiVersion": "x/v1"}]})),
            true,
        ),
        case(
            "ks-image-no-name",
            Ks,
            ks(json!({"images": [{"newTag": "1"}]})),
            true,
        ),
        case(
            "ks-patch-no-patch",
            Ks,
            ks(json!({"patches": [{"target": {"kind": "Deployment"}}]})),
            true,
        ),
        case(
            "ks-ignore-no-paths",
            Ks,
            ks(json!({"ignore": [{"target": {"kind": "Deployment"}}]})),
            true,
        ),
        case(
            "ks-depends-no-name",
            Ks,
            ks(json!({"dependsOn": [{"namespace": "x"}]})),
            true,
        ),
        case("ks-prune-string", Ks, ks(json!({"prune": "true"})), true),
        case("ks-force-string", Ks, ks(json!({"force": "yes"})), true),
        // Kustomization: accepted
        case("ks-minimal", Ks, ks(json!({})), false),
        case(
            "ks-kubeconfig-secret",
            Ks,
            ks(json!({"kubeConfig": {"secretRef": {"name": "kc"}}})),
            false,
        ),
        case(
            "ks-kubeconfig-configmap",
            Ks,
            ks(json!({"kubeConfig": {"configMapRef": {"name": "kc"}}})),
            false,
        ),
        case(
            "ks-substitute-from-default-optional",
            Ks,
            ks(json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}})),
            false,
        ),
        case(
            "ks-legacy-patches-field",
            Ks,
            ks(json!({"patchesStrategicMerge": [{"kind": "x"}]})),
            false,
        ),
        case(
            "ks-all-fields",
            Ks,
            ks(json!({
            "buildMetadata": ["originAnnotations", "transformerAnnotations"],
            "commonMetadata": {"annotations": {"a": "1"}, "labels": {"l": "2"}},
            "components": ["../c"],
            "decryption": {"provider": "sops", "secretRef": {"name": "sops"}, "serviceAccountName": "kms"},
            "deletionPolicy": "WaitForTermination",
            "dependsOn": [{"name": "infra", "namespace": "flux-system", "readyExpr": "dep.status.x == 1"}],
            "force": true,
            "healthCheckExprs": [{"apiVersion": "example.com/v1", "kind": "Foo", "current": "true",
                                  "inProgress": "false", "failed": "false"}],
            "healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "app"}],
            "ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment", "labelSelector": "a=b"}}],
            "ignoreMissingComponents": true,
            "images": [{"name": "nginx", "newName": "mirror/nginx", "newTag": "1.2", "digest": "sha256:00"}],
            "kubeConfig": {"secretRef": {"name": "kc", "key": "value"}},
            "namePrefix": "p-", "nameSuffix": "-s",
            "patches": [{"patch": "- op: remove\n  path: /x\n", "target": {"group": "apps", "version": "v1",
                         "kind": "Deployment", "name": "web", "namespace": "app", "annotationSelector": "x"}}],
            "path": "./deploy",
            "postBuild": {"substitute": {"A": "b"}, "substituteFrom": [{"kind": "Secret", "name": "vars", "optional": true}],
                          "substituteStrategy": "Always"},
            "retryInterval": "1m", "serviceAccountName": "deployer",
            "sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository", "name": "src", "namespace": "other"},
            "suspend": false, "targetNamespace": "app", "timeout": "2m", "wait": true})),
            false,
        ),
        case(
            "ks-all-source-kinds-bucket",
            Ks,
            ks(json!({"sourceRef": {"kind": "Bucket", "name": "b"}})),
            false,
        ),
        case(
            "ks-external-artifact",
            Ks,
            ks(json!({"sourceRef": {"kind": "ExternalArtifact", "name": "b"}})),
            false,
        ),
    ]
}

pub fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            b.insert(k, v);
        }
    }
}
