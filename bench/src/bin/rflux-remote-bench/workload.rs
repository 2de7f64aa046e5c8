//! The workload: the repository files (one app base of 4 objects), the per-cluster kubeconfig
//! Secrets and the objects applied on the hub. Pure functions; the caller does the I/O.

use serde_json::{Value, json};

/// Namespace on the hub of the GitRepository, the kubeconfig Secrets and the Kustomizations.
pub const HUB_NS: &str = "fleet";
/// Name of the one GitRepository every Kustomization reads.
pub const SOURCE: &str = "fleet";
/// Path of the app base in the repository.
pub const APP_PATH: &str = "app";
/// Objects the app base builds to.
pub const OBJECTS_PER_CLUSTER: usize = 4;

/// Name of the i-th cluster: its Kustomization, its kubeconfig Secret (`<name>-kubeconfig`), its
/// namespace on the target apiserver and (with `remote-` in front) its user there.
pub fn cluster_name(i: usize) -> String {
    format!("cluster-{i:02}")
}

/// The user of the i-th cluster's kubeconfig on the target apiserver (a client certificate).
pub fn cluster_user(i: usize) -> String {
    format!("remote-{}", cluster_name(i))
}

pub fn secret_name(i: usize) -> String {
    format!("{}-kubeconfig", cluster_name(i))
}

/// The files of the repository: ServiceAccount, headless Service, Deployment (0 replicas) and
/// ConfigMap, named after `${cluster}` (postBuild substitution), like the fleet benchmark's app.
pub fn repo_files() -> Vec<(String, String)> {
    vec![
        (
            format!("{APP_PATH}/kustomization.yaml"),
            "apiVersion: kustomize.config.k8s.io/v1beta1\n\
             kind: Kustomization\n\
             resources:\n\
             - serviceaccount.yaml\n\
             - service.yaml\n\
             - deployment.yaml\n\
             - configmap.yaml\n"
                .to_string(),
        ),
        (
            format!("{APP_PATH}/serviceaccount.yaml"),
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app\n".to_string(),
        ),
        (
            format!("{APP_PATH}/service.yaml"),
            "apiVersion: v1\n\
             kind: Service\n\
             metadata:\n  name: app\n  labels:\n    app: app\n\
             spec:\n  clusterIP: None\n  selector:\n    app: app\n\
             \x20 ports:\n  - name: http\n    port: 80\n    targetPort: http\n"
                .to_string(),
        ),
        (
            format!("{APP_PATH}/deployment.yaml"),
            "apiVersion: apps/v1\n\
             kind: Deployment\n\
             metadata:\n  name: app\n  labels:\n    app: app\n\
             spec:\n  replicas: 0\n  selector:\n    matchLabels:\n      app: app\n\
             \x20 template:\n    metadata:\n      labels:\n        app: app\n\
             \x20   spec:\n      serviceAccountName: app\n      containers:\n\
             \x20     - name: app\n        image: ghcr.io/stefanprodan/podinfo:6.7.0\n\
             \x20       ports:\n        - name: http\n          containerPort: 9898\n"
                .to_string(),
        ),
        (
            format!("{APP_PATH}/configmap.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\n\
             data:\n  cluster: ${cluster}\n  region: eu-west-1\n"
                .to_string(),
        ),
    ]
}

/// The kubeconfig Secret of the i-th cluster (key `value`, as Flux reads it).
pub fn kubeconfig_secret(i: usize, kubeconfig: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name(i), "namespace": HUB_NS},
        "type": "Opaque",
        "stringData": {"value": kubeconfig},
    })
}

/// The one GitRepository on `url`, branch main, interval 1h.
pub fn git_repository(url: &str) -> Value {
    json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": SOURCE, "namespace": HUB_NS},
        "spec": {"url": url, "interval": "1h", "timeout": "60s", "ref": {"branch": "main"}},
    })
}

/// The i-th Kustomization: the app base applied to the i-th cluster (`kubeConfig.secretRef`) in
/// its own namespace there, with the fleet benchmark's settings (wait, prune, timeout 1m).
pub fn kustomization(i: usize) -> Value {
    let name = cluster_name(i);
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": HUB_NS},
        "spec": {
            "interval": "1h",
            "retryInterval": "1m",
            "timeout": "1m",
            "path": format!("./{APP_PATH}"),
            "prune": true,
            "wait": true,
            "targetNamespace": name,
            "kubeConfig": {"secretRef": {"name": secret_name(i)}},
            "sourceRef": {"kind": "GitRepository", "name": SOURCE},
            "postBuild": {"substitute": {"cluster": name}},
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn app_base_builds_to_four_objects() {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in repo_files() {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let res = rflux_kustomize::build(
            &dir.path().join(APP_PATH),
            &rflux_kustomize::BuildOptions::default(),
        )
        .unwrap();
        let mut kinds: Vec<&str> = res
            .iter()
            .map(|r| r.obj["kind"].as_str().unwrap())
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            ["ConfigMap", "Deployment", "Service", "ServiceAccount"]
        );
        assert_eq!(kinds.len(), OBJECTS_PER_CLUSTER);
        let cm = res.iter().find(|r| r.obj["kind"] == "ConfigMap").unwrap();
        assert_eq!(cm.obj["data"]["cluster"], "${cluster}");
    }

    #[test]
    fn every_cluster_has_its_own_secret_user_and_namespace() {
        let names: std::collections::BTreeSet<String> = (0..50).map(cluster_user).collect();
        assert_eq!(names.len(), 50);
        let k = kustomization(7);
        assert_eq!(k["metadata"]["name"], "cluster-07");
        assert_eq!(k["spec"]["targetNamespace"], "cluster-07");
        assert_eq!(
            k["spec"]["kubeConfig"]["secretRef"]["name"],
            "cluster-07-kubeconfig"
        );
        assert_eq!(
            k["spec"]["postBuild"]["substitute"]["cluster"],
            "cluster-07"
        );
        let s = kubeconfig_secret(7, "kc");
        assert_eq!(s["metadata"]["name"], secret_name(7));
        assert_eq!(s["stringData"]["value"], "kc");
        assert_eq!(git_repository("http://x")["spec"]["url"], "http://x");
    }
}
