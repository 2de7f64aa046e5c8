//! The fleet workload: the files pushed to the benchmark repository and the GitRepository /
//! Kustomization objects applied in one burst. Pure functions; the caller does the I/O.

use serde_json::{Value, json};

/// Namespace of the GitRepositories, Kustomizations and the objects they apply.
pub const FLEET_NS: &str = "fleet";
/// Namespace of the API-cost Kustomization and its 100 ConfigMaps.
pub const BIG_NS: &str = "fleet-big";
/// Path in the repository of the shared app base (4 objects, `${app_name}` substituted).
pub const APP_PATH: &str = "app";
/// Path in the repository of the 100-ConfigMap tree used for the API-cost measurement.
pub const BIG_PATH: &str = "big";
/// Objects under [`BIG_PATH`].
pub const BIG_OBJECTS: usize = 100;
/// Pod-template annotation the drift phase changes behind the controller's back.
pub const DRIFT_ANNOTATION: &str = "fleet.rflux.dev/config";

/// GitRepository layout of a fleet run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// One GitRepository per Kustomization (N clones).
    A,
    /// One GitRepository shared by all Kustomizations.
    B,
}

/// Name of the i-th app (and of its Kustomization and, in variant A, its GitRepository).
pub fn app_name(i: usize) -> String {
    format!("app-{i:04}")
}

/// Name of the GitRepository the i-th Kustomization reads.
pub fn source_name(variant: Variant, i: usize) -> String {
    match variant {
        Variant::A => app_name(i),
        Variant::B => "fleet".to_string(),
    }
}

/// The files of the repository at revision `rev` (1, 2, …): the app base under `app/` and
/// the ConfigMap tree under `big/`. `rev` is a label on every object, so bumping it changes
/// all N apps. The Service is headless: the test control plane's service range is a /24, too
/// small for one ClusterIP per app at N ≥ 250.
pub fn repo_files(rev: u32) -> Vec<(String, String)> {
    let mut files = vec![
        (
            format!("{APP_PATH}/kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\n\
                 kind: Kustomization\n\
                 namespace: {FLEET_NS}\n\
                 labels:\n\
                 - pairs:\n    fleet.rflux.dev/rev: \"{rev}\"\n\
                 resources:\n\
                 - serviceaccount.yaml\n\
                 - service.yaml\n\
                 - deployment.yaml\n\
                 - ingress.yaml\n"
            ),
        ),
        (
            format!("{APP_PATH}/serviceaccount.yaml"),
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ${app_name}\n".to_string(),
        ),
        (
            format!("{APP_PATH}/service.yaml"),
            "apiVersion: v1\n\
             kind: Service\n\
             metadata:\n  name: ${app_name}\n  labels:\n    app: ${app_name}\n\
             spec:\n  clusterIP: None\n  selector:\n    app: ${app_name}\n\
             \x20 ports:\n  - name: http\n    port: 80\n    targetPort: http\n"
                .to_string(),
        ),
        (
            format!("{APP_PATH}/deployment.yaml"),
            format!(
                "apiVersion: apps/v1\n\
                 kind: Deployment\n\
                 metadata:\n  name: ${{app_name}}\n  labels:\n    app: ${{app_name}}\n\
                 spec:\n  replicas: 0\n  selector:\n    matchLabels:\n      app: ${{app_name}}\n\
                 \x20 template:\n    metadata:\n      labels:\n        app: ${{app_name}}\n\
                 \x20     annotations:\n        {DRIFT_ANNOTATION}: \"v1\"\n\
                 \x20   spec:\n      serviceAccountName: ${{app_name}}\n      containers:\n\
                 \x20     - name: app\n        image: ghcr.io/stefanprodan/podinfo:6.7.0\n\
                 \x20       ports:\n        - name: http\n          containerPort: 9898\n"
            ),
        ),
        (
            format!("{APP_PATH}/ingress.yaml"),
            "apiVersion: networking.k8s.io/v1\n\
             kind: Ingress\n\
             metadata:\n  name: ${app_name}\n\
             spec:\n  rules:\n  - host: ${app_name}.fleet.example\n    http:\n      paths:\n\
             \x20     - path: /\n        pathType: Prefix\n        backend:\n          service:\n\
             \x20           name: ${app_name}\n            port:\n              number: 80\n"
                .to_string(),
        ),
    ];
    let mut resources = String::new();
    for j in 0..BIG_OBJECTS {
        resources.push_str(&format!("- cm-{j:03}.yaml\n"));
        files.push((
            format!("{BIG_PATH}/cm-{j:03}.yaml"),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big-{j:03}\n\
                 data:\n  index: \"{j}\"\n  rev: \"{rev}\"\n"
            ),
        ));
    }
    files.push((
        format!("{BIG_PATH}/kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: {BIG_NS}\nresources:\n{resources}"
        ),
    ));
    files
}

/// A GitRepository on `url`, branch main, interval 1h.
pub fn git_repository(name: &str, namespace: &str, url: &str) -> Value {
    json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "url": url,
            "interval": "1h",
            "timeout": "60s",
            "ref": {"branch": "main"},
        },
    })
}

/// The i-th fleet Kustomization: `./app` with `app_name` substituted, wait, prune, timeout 1m.
pub fn fleet_kustomization(variant: Variant, i: usize) -> Value {
    let name = app_name(i);
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": FLEET_NS},
        "spec": {
            "interval": "1h",
            "retryInterval": "1m",
            "timeout": "1m",
            "path": format!("./{APP_PATH}"),
            "prune": true,
            "wait": true,
            "sourceRef": {"kind": "GitRepository", "name": source_name(variant, i)},
            "postBuild": {"substitute": {"app_name": name}},
        },
    })
}

/// The API-cost Kustomization: 100 ConfigMaps, same settings as the fleet.
pub fn big_kustomization(source: &str) -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "big", "namespace": BIG_NS},
        "spec": {
            "interval": "1h",
            "retryInterval": "1m",
            "timeout": "1m",
            "path": format!("./{BIG_PATH}"),
            "prune": true,
            "wait": true,
            "sourceRef": {"kind": "GitRepository", "name": source},
        },
    })
}

/// Every object of a fleet burst: the GitRepositories first, then the Kustomizations.
pub fn fleet_objects(variant: Variant, n: usize, url: &str) -> Vec<Value> {
    let mut out = Vec::with_capacity(2 * n);
    match variant {
        Variant::A => {
            out.extend((0..n).map(|i| git_repository(&app_name(i), FLEET_NS, url)));
        }
        Variant::B => out.push(git_repository("fleet", FLEET_NS, url)),
    }
    out.extend((0..n).map(|i| fleet_kustomization(variant, i)));
    out
}

/// Flux's revision string for a branch commit.
pub fn branch_revision(sha: &str) -> String {
    format!("main@sha1:{sha}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn write_tree(rev: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in repo_files(rev) {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn app_base_builds_to_four_objects_with_the_rev_label() {
        let dir = write_tree(7);
        let res = rflux_kustomize::build(
            &dir.path().join(APP_PATH),
            &rflux_kustomize::BuildOptions::default(),
        )
        .unwrap();
        let kinds: Vec<&str> = res
            .iter()
            .map(|r| r.obj["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds.len(), 4, "{kinds:?}");
        for kind in ["ServiceAccount", "Service", "Deployment", "Ingress"] {
            assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
        }
        for r in &res {
            assert_eq!(r.obj["metadata"]["namespace"], FLEET_NS);
            assert_eq!(r.obj["metadata"]["name"], "${app_name}");
            assert_eq!(r.obj["metadata"]["labels"]["fleet.rflux.dev/rev"], "7");
        }
        let deploy = res.iter().find(|r| r.obj["kind"] == "Deployment").unwrap();
        assert_eq!(deploy.obj["spec"]["replicas"], 0);
        let svc = res.iter().find(|r| r.obj["kind"] == "Service").unwrap();
        assert_eq!(svc.obj["spec"]["clusterIP"], "None");
        assert_eq!(
            deploy.obj["spec"]["template"]["metadata"]["annotations"][DRIFT_ANNOTATION],
            "v1"
        );
    }

    #[test]
    fn big_tree_builds_to_one_hundred_configmaps() {
        let dir = write_tree(1);
        let res = rflux_kustomize::build(
            &dir.path().join(BIG_PATH),
            &rflux_kustomize::BuildOptions::default(),
        )
        .unwrap();
        assert_eq!(res.len(), BIG_OBJECTS);
        assert!(
            res.iter()
                .all(|r| r.obj["kind"] == "ConfigMap" && r.obj["metadata"]["namespace"] == BIG_NS)
        );
    }

    #[test]
    fn variants_differ_in_sources() {
        let a = fleet_objects(Variant::A, 3, "http://x/r.git");
        let b = fleet_objects(Variant::B, 3, "http://x/r.git");
        assert_eq!(a.len(), 6);
        assert_eq!(b.len(), 4);
        assert_eq!(a[5]["spec"]["sourceRef"]["name"], "app-0002");
        assert_eq!(b[3]["spec"]["sourceRef"]["name"], "fleet");
        assert_eq!(
            b[3]["spec"]["postBuild"]["substitute"]["app_name"],
            "app-0002"
        );
        assert_eq!(branch_revision("abc"), "main@sha1:abc");
    }
}
