//! The command lines of an instance's processes, computed from its recorded state so that a
//! component restarted alone gets exactly the flags (ports, data, certificates) it had.

use super::state::ControlPlaneState;

fn pki(s: &ControlPlaneState, file: &str) -> String {
    s.dir.join("pki").join(file).display().to_string()
}

/// etcd: one member, data in `<state>/etcd`.
pub(super) fn etcd(s: &ControlPlaneState) -> Vec<String> {
    vec![
        "--name=default".to_string(),
        format!("--data-dir={}", s.dir.join("etcd").display()),
        format!(
            "--listen-client-urls=http://127.0.0.1:{}",
            s.etcd_client_port
        ),
        format!(
            "--advertise-client-urls=http://127.0.0.1:{}",
            s.etcd_client_port
        ),
        format!("--listen-peer-urls=http://127.0.0.1:{}", s.etcd_peer_port),
        format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{}",
            s.etcd_peer_port
        ),
        format!(
            "--initial-cluster=default=http://127.0.0.1:{}",
            s.etcd_peer_port
        ),
        "--unsafe-no-fsync=true".to_string(),
        "--log-level=warn".to_string(),
        "--quota-backend-bytes=1073741824".to_string(),
    ]
}

/// kube-apiserver, plus [`ControlPlaneState::extra_apiserver_args`].
pub(super) fn apiserver(s: &ControlPlaneState) -> Vec<String> {
    let mut args = vec![
        format!("--etcd-servers=http://127.0.0.1:{}", s.etcd_client_port),
        "--advertise-address=127.0.0.1".to_string(),
        "--bind-address=127.0.0.1".to_string(),
        format!("--secure-port={}", s.apiserver_port),
        format!("--cert-dir={}", s.dir.join("pki").display()),
        format!("--tls-cert-file={}", pki(s, "apiserver.crt")),
        format!("--tls-private-key-file={}", pki(s, "apiserver.key")),
        format!("--client-ca-file={}", pki(s, "ca.crt")),
        format!("--token-auth-file={}", s.dir.join("tokens.csv").display()),
        "--authorization-mode=RBAC".to_string(),
        "--service-cluster-ip-range=10.0.0.0/24".to_string(),
        "--allow-privileged=true".to_string(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
        format!("--service-account-key-file={}", pki(s, "sa.pub")),
        format!("--service-account-signing-key-file={}", pki(s, "sa.key")),
        "--profiling=false".to_string(),
        "--event-ttl=1h".to_string(),
        // The `kubernetes` Endpoints may not point at loopback: do not
        // reconcile them (nothing in the cluster dials the API server).
        "--endpoint-reconciler-type=none".to_string(),
    ];
    args.extend(s.extra_apiserver_args.iter().cloned());
    args
}

/// kube-controller-manager (signs with the cluster CA, no leader election).
pub(super) fn controller_manager(s: &ControlPlaneState) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", s.kubeconfig.display()),
        "--leader-elect=false".to_string(),
        "--secure-port=0".to_string(),
        format!("--root-ca-file={}", pki(s, "ca.crt")),
        format!("--service-account-private-key-file={}", pki(s, "sa.key")),
        format!("--cluster-signing-cert-file={}", pki(s, "ca.crt")),
        format!("--cluster-signing-key-file={}", pki(s, "ca.key")),
        "--kube-api-qps=100".to_string(),
        "--kube-api-burst=200".to_string(),
        "--profiling=false".to_string(),
        // kwok renews the Node's lease from a test machine that may be saturated (2 cores,
        // parallel builds): do not taint the Node `unreachable` after the default 50 s.
        "--node-monitor-grace-period=5m".to_string(),
    ]
}

/// kube-scheduler.
pub(super) fn scheduler(s: &ControlPlaneState) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", s.kubeconfig.display()),
        "--leader-elect=false".to_string(),
        "--secure-port=0".to_string(),
        "--profiling=false".to_string(),
    ]
}

/// kwok, managing every Node.
pub(super) fn kwok(s: &ControlPlaneState) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", s.kubeconfig.display()),
        "--manage-all-nodes=true".to_string(),
        "--cidr=10.0.0.1/24".to_string(),
        "--node-ip=10.0.0.1".to_string(),
        format!("--server-address=127.0.0.1:{}", s.kwok_port),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::control_plane::state::{ControlPlaneOptions, apiserver_flags_for};

    fn state(dir: &std::path::Path) -> ControlPlaneState {
        ControlPlaneState {
            name: "t".into(),
            dir: dir.to_path_buf(),
            kubeconfig: dir.join("kubeconfig"),
            server: "https://127.0.0.1:1".into(),
            ca_cert: dir.join("pki/ca.crt"),
            admin_token: "x".into(),
            etcd_client_port: 2379,
            etcd_peer_port: 2380,
            apiserver_port: 6443,
            kwok_port: 1,
            processes: Vec::new(),
            started_at: 0,
            ready: false,
            extra_apiserver_args: Vec::new(),
        }
    }

    #[test]
    fn an_audit_policy_adds_flags_and_a_policy_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = state(dir.path());
        let opts = ControlPlaneOptions {
            apiserver_args: vec!["--v=2".into()],
            audit_policy: Some("apiVersion: audit.k8s.io/v1\nkind: Policy\n".into()),
        };
        s.extra_apiserver_args = apiserver_flags_for(&opts, dir.path()).unwrap();
        let args = apiserver(&s);
        assert!(args.contains(&"--v=2".to_string()));
        let policy = dir.path().join("audit-policy.yaml");
        assert!(args.contains(&format!("--audit-policy-file={}", policy.display())));
        assert!(args.iter().any(|a| a.starts_with("--audit-log-path=")));
        assert!(
            std::fs::read_to_string(policy)
                .unwrap()
                .contains("kind: Policy")
        );
        // The recorded state survives a round trip (a restart reads it back).
        let json = serde_json::to_string(&s).unwrap();
        let back: ControlPlaneState = serde_json::from_str(&json).unwrap();
        assert_eq!(apiserver(&back), args);
    }

    #[test]
    fn state_files_of_older_launchers_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = serde_json::to_value(state(dir.path())).unwrap();
        v.as_object_mut().unwrap().remove("extra_apiserver_args");
        let s: ControlPlaneState = serde_json::from_value(v).unwrap();
        assert!(s.extra_apiserver_args.is_empty());
        assert!(etcd(&s).contains(&"--listen-client-urls=http://127.0.0.1:2379".to_string()));
    }
}
