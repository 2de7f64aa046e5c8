//! Foundation e2e tests: the control plane really schedules and runs
//! workloads, RBAC is enforced, and the git server authenticates for real.
//! Each test works in its own namespace / repository.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use rflux_e2e::{ControlPlane, GitServer, TestRepo};
use serde::de::DeserializeOwned;
use serde_json::json;

fn from_json<T: DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).unwrap()
}

#[tokio::test]
async fn apiserver_reports_the_pinned_version() {
    let cp = ControlPlane::shared().await.unwrap();
    let info = cp
        .client()
        .await
        .unwrap()
        .apiserver_version()
        .await
        .unwrap();
    assert_eq!(info.git_version, "v1.35.4");
    assert_eq!(info.major, "1");
    assert_eq!(info.minor, "35");
}

#[tokio::test]
async fn deployment_becomes_available_on_the_kwok_node() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("deploy").await.unwrap();
    let client = cp.client().await.unwrap();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let deployment: Deployment = from_json(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }));
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let d = deployments.get("web").await.unwrap();
        let status = d.status.unwrap_or_default();
        let available = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True");
        if available && status.available_replicas == Some(1) {
            break;
        }
        if Instant::now() >= deadline {
            let why = workload_diagnostics(&client, &ns).await;
            panic!(
                "deployment {ns}/web never became Available\n{why}\n{}",
                cp.log_tails(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // KCM made the ReplicaSet and Pod, the scheduler bound it, kwok ran it.
    let pods = Api::<Pod>::namespaced(client, &ns)
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 1);
    let pod = &pods.items[0];
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("kwok-node-0"));
    // ServiceAccount admission ran: the pod got the default ServiceAccount.
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    let status = pod.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(
        status
            .pod_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.0.0."))
    );
}

/// What a Deployment that does not become Available is waiting for: its ReplicaSets, pods
/// (phase, conditions, node), the Node's conditions and taints, and the namespace's events.
async fn workload_diagnostics(client: &kube::Client, ns: &str) -> String {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::{Event, Node};
    let lp = ListParams::default();
    let mut out = String::new();
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list(&lp)
        .await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns).list(&lp).await;
    let nodes = Api::<Node>::all(client.clone()).list(&lp).await;
    let events = Api::<Event>::namespaced(client.clone(), ns).list(&lp).await;
    for r in rs.map(|l| l.items).unwrap_or_default() {
        out += &format!("replicaset {:?}: {:?}\n", r.metadata.name, r.status);
    }
    for p in pods.map(|l| l.items).unwrap_or_default() {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        out += &format!("pod {:?} on {node:?}: {:?}\n", p.metadata.name, p.status);
    }
    for n in nodes.map(|l| l.items).unwrap_or_default() {
        let taints = n.spec.as_ref().and_then(|s| s.taints.clone());
        let conditions = n.status.as_ref().and_then(|s| s.conditions.clone());
        out += &format!(
            "node {:?}: taints {taints:?} conditions {conditions:?}\n",
            n.metadata.name
        );
    }
    for e in events.map(|l| l.items).unwrap_or_default() {
        out += &format!(
            "event {:?} {:?}: {:?}\n",
            e.involved_object.name, e.reason, e.message
        );
    }
    out
}

#[tokio::test]
async fn garbage_collection_and_namespace_deletion_complete() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("gc").await.unwrap();
    let client = cp.client().await.unwrap();
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "owner"}})),
        )
        .await
        .unwrap();
    let dependent: ConfigMap = from_json(json!({"metadata": {
        "name": "dependent",
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid.clone().unwrap(),
        }],
    }}));
    cms.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    cms.delete("owner", &Default::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while cms.get_opt("dependent").await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the garbage collector never deleted the dependent"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // A namespace with a running Pod is finalized: kwok lets the Pod go.
    let pod: Pod = from_json(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }));
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let phase = pods.get("p").await.unwrap().status.and_then(|s| s.phase);
        if phase.as_deref() == Some("Running") {
            break;
        }
        assert!(Instant::now() < deadline, "pod never ran: {phase:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let namespaces = Api::<Namespace>::all(client);
    namespaces.delete(&ns, &Default::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    while namespaces.get_opt(&ns).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "namespace {ns} never finished terminating"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn is_forbidden<T: std::fmt::Debug>(result: &Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(status)) if status.code == 403)
}

#[tokio::test]
async fn rbac_and_impersonation_are_enforced() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("rbac").await.unwrap();
    let other_ns = cp.create_namespace("rbac-other").await.unwrap();
    let admin = cp.client().await.unwrap();
    let sa: ServiceAccount = from_json(json!({"metadata": {"name": "robot"}}));
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();

    let user = format!("system:serviceaccount:{ns}:robot");
    let groups = [
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{ns}"),
    ];
    let group_refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let robot = cp.impersonating_client(&user, &group_refs).await.unwrap();
    let cm = |name: &str| -> ConfigMap {
        from_json(json!({"metadata": {"name": name}, "data": {"k": "v"}}))
    };

    let denied = Api::<ConfigMap>::namespaced(robot.clone(), &ns)
        .create(&PostParams::default(), &cm("before"))
        .await;
    assert!(
        is_forbidden(&denied),
        "expected 403 before the RoleBinding, got {denied:?}"
    );

    let role: Role = from_json(json!({
        "metadata": {"name": "configmaps"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]}],
    }));
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = from_json(json!({
        "metadata": {"name": "robot-configmaps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": ns}],
    }));
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // The RBAC authorizer reads from informer caches: allow a moment.
    let deadline = Instant::now() + Duration::from_secs(15);
    let robot_cms = Api::<ConfigMap>::namespaced(robot.clone(), &ns);
    loop {
        match robot_cms.create(&PostParams::default(), &cm("after")).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 403 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create after the RoleBinding failed: {e:?}"),
        }
    }
    let created = Api::<ConfigMap>::namespaced(admin, &ns)
        .get("after")
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["k"], "v");
    // The grant is namespaced: the same user is still refused elsewhere, and
    // verbs outside the Role are refused too.
    let elsewhere = Api::<ConfigMap>::namespaced(robot.clone(), &other_ns)
        .create(&PostParams::default(), &cm("elsewhere"))
        .await;
    assert!(
        is_forbidden(&elsewhere),
        "expected 403 in {other_ns}, got {elsewhere:?}"
    );
    let delete = robot_cms.delete("after", &Default::default()).await;
    assert!(
        is_forbidden(&delete),
        "delete is not granted, got {delete:?}"
    );
}

#[tokio::test]
async fn a_second_instance_is_independent_and_accepts_token_kubeconfigs() {
    let local = ControlPlane::shared().await.unwrap();
    let remote = ControlPlane::shared_named("remote").await.unwrap();
    assert_ne!(local.server_url(), remote.server_url());
    assert_ne!(local.kubeconfig_path(), remote.kubeconfig_path());

    let ns = remote.create_namespace("remote-only").await.unwrap();
    let local_ns = Api::<Namespace>::all(local.client().await.unwrap())
        .get_opt(&ns)
        .await
        .unwrap();
    assert!(
        local_ns.is_none(),
        "namespace {ns} leaked into the default instance"
    );

    // The static-token kubeconfig (as a remote-cluster Secret would carry it)
    // authenticates as system:masters; a wrong token is refused with 401.
    let client_from = |text: String| async move {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    };
    let by_token = client_from(remote.token_kubeconfig(None).unwrap()).await;
    Api::<Namespace>::all(by_token).get(&ns).await.unwrap();
    let wrong = remote
        .token_kubeconfig(None)
        .unwrap()
        .replace(remote.admin_token(), "not-a-token");
    let denied = Api::<Namespace>::all(client_from(wrong).await)
        .get(&ns)
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 401),
        "{denied:?}"
    );
}

// ---------------------------------------------------------------- git ----

#[derive(Debug)]
struct Cloned {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

/// The environment may point git at the system CA bundle (`GIT_SSL_CAINFO`
/// beats `-c http.sslCAInfo`); tests choose their trust explicitly.
fn clean_tls_env(cmd: &mut Command) {
    for var in [
        "GIT_SSL_CAINFO",
        "GIT_SSL_CAPATH",
        "GIT_SSL_CERT",
        "GIT_SSL_KEY",
        "GIT_SSL_NO_VERIFY",
        "CURL_CA_BUNDLE",
    ] {
        cmd.env_remove(var);
    }
}

/// `git clone` with an isolated config; `Ok` holds the clone, `Err` stderr.
fn git_clone(url: &str, config: &[String], env: &[(&str, String)]) -> Result<Cloned, String> {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("clone");
    let mut cmd = Command::new("git");
    for c in config {
        cmd.arg("-c").arg(c);
    }
    cmd.args(["clone", "--quiet", url])
        .arg(&path)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_SSH_COMMAND")
        .env_remove("SSH_AUTH_SOCK");
    clean_tls_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    if out.status.success() {
        Ok(Cloned { _tmp: tmp, path })
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn head_of(path: &Path) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(path)
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A repository with one pushed commit on `main`; returns it and the sha.
async fn seeded_repo(name: &str) -> (&'static GitServer, TestRepo, String) {
    let git = GitServer::shared().await.unwrap();
    let repo = git.create_repo(name).unwrap();
    repo.write("deploy/configmap.yaml", &format!("name: {}\n", repo.name()))
        .unwrap();
    let sha = repo.commit("initial").unwrap();
    repo.push("main").unwrap();
    (git, repo, sha)
}

fn write_file(dir: &Path, name: &str, contents: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path.display().to_string()
}

/// git's ways of saying the server answered 401: with credentials in the URL
/// it reports the failure; without, it wants to prompt (disabled here).
fn assert_auth_refused(stderr: &str) {
    assert!(
        ["Authentication failed", "401", "could not read Username"]
            .iter()
            .any(|m| stderr.contains(m)),
        "expected an authentication failure, got: {stderr}"
    );
}

fn with_userinfo(url: &str, user: &str, password: &str) -> String {
    url.replacen("https://", &format!("https://{user}:{password}@"), 1)
}

#[tokio::test]
async fn git_over_plain_http_is_anonymous_and_speaks_protocol_v2() {
    let (git, repo, sha) = seeded_repo("http").await;
    let clone = git_clone(&git.http_url(repo.name()), &[], &[]).unwrap();
    assert_eq!(head_of(&clone.path), sha);
    assert_eq!(
        std::fs::read_to_string(clone.path.join("deploy/configmap.yaml")).unwrap(),
        format!("name: {}\n", repo.name())
    );

    let out = Command::new("git")
        .args([
            "-c",
            "protocol.version=2",
            "ls-remote",
            &git.http_url(repo.name()),
            "refs/heads/main",
        ])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TRACE_PACKET", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&sha));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("version 2"),
        "server did not answer with protocol v2"
    );

    // Credentials, when sent, must be valid even on the anonymous listener.
    let header = |token: &str| vec![format!("http.extraHeader=Authorization: Bearer {token}")];
    let bad = git_clone(&git.http_url(repo.name()), &header("wrong"), &[]).unwrap_err();
    assert_auth_refused(&bad);
    assert!(
        git_clone(
            &git.http_url(repo.name()),
            &header(&git.bearer_token()),
            &[]
        )
        .is_ok()
    );
    // Unknown repositories are 404s, not empty clones.
    assert!(git_clone(&git.http_url("does-not-exist"), &[], &[]).is_err());
}

#[tokio::test]
async fn git_over_https_with_basic_auth() {
    let (git, repo, sha) = seeded_repo("https-basic").await;
    let tmp = tempfile::tempdir().unwrap();
    let ca = write_file(tmp.path(), "ca.pem", &git.ca_pem());
    let ca_config = vec![format!("http.sslCAInfo={ca}")];
    let (user, password) = git.basic_auth();
    let url = git.https_url(repo.name());

    let clone = git_clone(&with_userinfo(&url, &user, &password), &ca_config, &[]).unwrap();
    assert_eq!(head_of(&clone.path), sha);

    // Pushing through the authenticated listener works too.
    let run = |args: &[&str]| {
        let mut cmd = Command::new("git");
        cmd.arg("-C")
            .arg(&clone.path)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                &ca_config[0],
            ])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null");
        clean_tls_env(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["commit", "-q", "--allow-empty", "-m", "over https"]);
    run(&["push", "-q", "origin", "HEAD:refs/heads/main"]);
    assert_eq!(
        repo.remote_rev("refs/heads/main").unwrap(),
        head_of(&clone.path)
    );
    assert_ne!(head_of(&clone.path), sha);

    let wrong = git_clone(
        &with_userinfo(&url, &user, "wrong-password"),
        &ca_config,
        &[],
    )
    .unwrap_err();
    assert_auth_refused(&wrong);
    let unknown_user = git_clone(&with_userinfo(&url, "mallory", &password), &ca_config, &[]);
    assert!(unknown_user.is_err());
    let anonymous = git_clone(&url, &ca_config, &[]);
    assert!(anonymous.is_err(), "HTTPS must require credentials");
    // Without the test CA the server certificate is not trusted.
    let untrusted = git_clone(&with_userinfo(&url, &user, &password), &[], &[]).unwrap_err();
    assert!(
        untrusted.to_lowercase().contains("certificate"),
        "{untrusted}"
    );
}

#[tokio::test]
async fn git_over_https_with_a_bearer_token() {
    let (git, repo, sha) = seeded_repo("https-bearer").await;
    let tmp = tempfile::tempdir().unwrap();
    let ca = write_file(tmp.path(), "ca.pem", &git.ca_pem());
    let config = |token: &str| {
        vec![
            format!("http.sslCAInfo={ca}"),
            format!("http.extraHeader=Authorization: Bearer {token}"),
        ]
    };
    let url = git.https_url(repo.name());

    let clone = git_clone(&url, &config(&git.bearer_token()), &[]).unwrap();
    assert_eq!(head_of(&clone.path), sha);
    let wrong = git_clone(&url, &config("not-the-token"), &[]).unwrap_err();
    assert_auth_refused(&wrong);
}

#[tokio::test]
async fn git_over_https_with_a_client_certificate() {
    let (git, repo, sha) = seeded_repo("mtls").await;
    let tmp = tempfile::tempdir().unwrap();
    let ca = write_file(tmp.path(), "ca.pem", &git.ca_pem());
    let (cert_pem, key_pem) = git.client_cert_pem();
    let cert = write_file(tmp.path(), "client.crt", &cert_pem);
    let key = write_file(tmp.path(), "client.key", &key_pem);
    let url = git.mtls_url(repo.name());

    let with_cert = vec![
        format!("http.sslCAInfo={ca}"),
        format!("http.sslCert={cert}"),
        format!("http.sslKey={key}"),
    ];
    let clone = git_clone(&url, &with_cert, &[]).unwrap();
    assert_eq!(head_of(&clone.path), sha);
    assert!(
        git_clone(&url, &[format!("http.sslCAInfo={ca}")], &[]).is_err(),
        "mTLS must require a client certificate"
    );
    // Basic credentials do not replace the certificate.
    let (user, password) = git.basic_auth();
    assert!(
        git_clone(
            &with_userinfo(&url, &user, &password),
            &[format!("http.sslCAInfo={ca}")],
            &[]
        )
        .is_err()
    );
}

fn ssh_keygen(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    path
}

fn ssh_env(key: &Path, known_hosts: &Path) -> Vec<(&'static str, String)> {
    vec![(
        "GIT_SSH_COMMAND",
        format!(
            "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o UserKnownHostsFile={} \
             -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes",
            key.display(),
            known_hosts.display()
        ),
    )]
}

#[tokio::test]
async fn git_over_ssh_with_known_hosts() {
    use std::os::unix::fs::PermissionsExt;
    let (git, repo, sha) = seeded_repo("ssh").await;
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("id");
    std::fs::write(&key, git.ssh_private_key_pem()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let known_hosts = tmp.path().join("known_hosts");
    std::fs::write(&known_hosts, format!("{}\n", git.known_hosts_line())).unwrap();
    let url = git.ssh_url(repo.name());

    let clone = git_clone(&url, &[], &ssh_env(&key, &known_hosts)).unwrap();
    assert_eq!(head_of(&clone.path), sha);

    // A key that is not authorized.
    let stranger = ssh_keygen(tmp.path(), "stranger");
    let refused = git_clone(&url, &[], &ssh_env(&stranger, &known_hosts)).unwrap_err();
    assert!(refused.contains("Permission denied"), "{refused}");

    // A host key that does not match the one in known_hosts.
    let fake_host = ssh_keygen(tmp.path(), "fake_host");
    let fake_pub = std::fs::read_to_string(fake_host.with_extension("pub")).unwrap();
    let host_field = git
        .known_hosts_line()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let wrong_hosts = tmp.path().join("wrong_known_hosts");
    std::fs::write(&wrong_hosts, format!("{host_field} {fake_pub}")).unwrap();
    let mismatch = git_clone(&url, &[], &ssh_env(&key, &wrong_hosts)).unwrap_err();
    assert!(
        mismatch.contains("Host key verification failed"),
        "{mismatch}"
    );

    // A host that is not in known_hosts at all.
    let empty_hosts = tmp.path().join("empty_known_hosts");
    std::fs::write(&empty_hosts, "").unwrap();
    let unknown = git_clone(&url, &[], &ssh_env(&key, &empty_hosts)).unwrap_err();
    assert!(
        unknown.contains("Host key verification failed"),
        "{unknown}"
    );
}

#[tokio::test]
async fn test_repo_helpers_drive_the_served_repository() {
    let (git, repo, first) = seeded_repo("helpers").await;
    let url = git.http_url(repo.name());
    repo.write("b.txt", "b").unwrap();
    let second = repo.commit("second").unwrap();
    repo.tag("v1.0.0", true).unwrap();
    repo.push("main").unwrap();
    repo.push_tags().unwrap();
    repo.checkout("feature").unwrap();
    repo.push("feature").unwrap();

    let ls_remote = |url: &str| {
        let out = Command::new("git")
            .args(["ls-remote", url])
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let refs = ls_remote(&url);
    assert!(
        refs.contains(&format!("{second}\trefs/heads/main")),
        "{refs}"
    );
    assert!(
        refs.contains(&format!("{second}\trefs/heads/feature")),
        "{refs}"
    );
    assert!(
        refs.contains(&format!("{second}\trefs/tags/v1.0.0^{{}}")),
        "annotated tag peels to the commit: {refs}"
    );

    repo.reset_hard(&first).unwrap();
    assert_eq!(repo.head().unwrap(), first);
    repo.force_push("main").unwrap();
    repo.delete_remote_branch("feature").unwrap();
    let refs = ls_remote(&url);
    assert!(
        refs.contains(&format!("{first}\trefs/heads/main")),
        "{refs}"
    );
    assert!(!refs.contains("refs/heads/feature"), "{refs}");
}
