//! Automatic sharding of the source-controller (issue 20 §4, docs/sharding.md): two replicas
//! with `--auto-sharding`, each with its own artifact storage and address, on one control plane.
//! - Every GitRepository becomes Ready, and its artifact is served by the replica that holds its
//!   slot (the URL names that replica's `--storage-adv-addr`; the digest matches the bytes);
//!   both replicas hold slots, and the slots they report are the ones the artifacts show.
//! - One replica is SIGKILLed: reconcile requests on its GitRepositories are handled by the other
//!   once the dead replica's slot leases expire, with a new artifact on the survivor's storage
//!   (the takeover time is printed).
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::runtime::sharding::slot_of;
use rflux_e2e::{ControlPlane, GitServer};
use serde_json::json;
use sha2::{Digest, Sha256};
use support::procs::{
    ControllerOptions, Controllers, WATCH_LABEL, apply_value, http_get, install_crds, wait_for,
};

const SHARDS: u32 = 16;
const REPOS: usize = 16;
const TIMEOUT: Duration = Duration::from_secs(120);

fn shard_flags() -> Vec<String> {
    [
        "--auto-sharding",
        "--shards=16",
        "--leader-election-lease-duration=10s",
        "--leader-election-renew-deadline=8s",
        "--leader-election-retry-period=2s",
    ]
    .iter()
    .map(ToString::to_string)
    .collect()
}

/// The slots a replica reports holding (`rflux_shard_owned{...} 1` on its metrics endpoint).
async fn owned_slots(ctl: &Controllers) -> BTreeSet<u32> {
    let (_, body) = http_get(ctl.source.metrics_addr, "/metrics")
        .await
        .unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with("rflux_shard_owned{") && l.ends_with(" 1"))
        .filter_map(|l| {
            let start = l.find("shard=\"")? + "shard=\"".len();
            let end = l[start..].find('"')? + start;
            l[start..end].parse().ok()
        })
        .collect()
}

/// `name -> (artifact URL, digest, lastHandledReconcileAt)` of every Ready GitRepository.
async fn artifacts(api: &Api<GitRepository>) -> BTreeMap<String, (String, String, Option<String>)> {
    let mut out = BTreeMap::new();
    for r in api.list(&ListParams::default()).await.unwrap() {
        let name = r.metadata.name.clone().unwrap_or_default();
        let Some(st) = r.status else { continue };
        let ready = st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if let (true, Some(a)) = (ready, st.artifact) {
            out.insert(name, (a.url, a.digest, st.last_handled_reconcile_at));
        }
    }
    out
}

async fn download(url: &str) -> Vec<u8> {
    let resp = reqwest::get(url).await.unwrap();
    assert!(resp.status().is_success(), "{url}: {}", resp.status());
    resp.bytes().await.unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_source_controllers_serve_their_own_slots_and_take_over() {
    let cp = ControlPlane::shared().await.unwrap();
    let client: Client = cp.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let ns = cp.create_namespace("shsrc").await.unwrap();
    let label = rflux_e2e::unique_name("shsrc");
    let repo = git.create_repo("shsrc").unwrap();
    repo.write("app/a.txt", "one\n").unwrap();
    repo.commit("one").unwrap();
    repo.push("main").unwrap();

    let opts = ControllerOptions {
        label: Some(label.clone()),
        runtime_namespace: ns.clone(),
        source_args: shard_flags(),
        ..Default::default()
    };
    let mut a = Controllers::start(cp, opts.clone()).await.unwrap();
    let b = Controllers::start(cp, opts).await.unwrap();

    // The second replica joins after the first took every slot: wait for the rebalance.
    let t_join = Instant::now();
    let split = wait_for(Duration::from_secs(60), "the slots split", || async {
        let (sa, sb) = (owned_slots(&a).await, owned_slots(&b).await);
        let whole = sa.is_disjoint(&sb) && sa.len() + sb.len() == SHARDS as usize;
        Ok((whole && !sa.is_empty() && !sb.is_empty()).then_some((sa, sb)))
    })
    .await;
    if let Err(e) = split {
        panic!("{e}\n{}\n{}", a.log_tails(30), b.log_tails(30));
    }
    println!(
        "MEASURE slots split between 2 replicas {:.2}s after the second started",
        t_join.elapsed().as_secs_f64()
    );

    let api: Api<GitRepository> = Api::namespaced(client.clone(), &ns);
    let t0 = Instant::now();
    for i in 0..REPOS {
        let gr = json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": format!("repo-{i:02}"), "namespace": ns,
                         "labels": {WATCH_LABEL: label}},
            "spec": {"url": git.http_url(repo.name()), "interval": "1h",
                     "ref": {"branch": "main"}}});
        apply_value(&client, &gr, "e2e").await.unwrap();
    }
    let ready = wait_for(TIMEOUT, "every GitRepository Ready", || async {
        let arts = artifacts(&api).await;
        Ok((arts.len() == REPOS).then_some(arts))
    })
    .await;
    let ready = match ready {
        Ok(r) => r,
        Err(e) => panic!("{e}\n{}\n{}", a.log_tails(30), b.log_tails(30)),
    };
    println!(
        "MEASURE {REPOS} GitRepositories Ready on 2 sharded replicas in {:.2}s",
        t0.elapsed().as_secs_f64()
    );

    // Each artifact is on the storage of the replica holding its slot, and is what it claims.
    let (slots_a, slots_b) = (owned_slots(&a).await, owned_slots(&b).await);
    println!("replica a holds {slots_a:?}, replica b holds {slots_b:?}");
    assert!(slots_a.is_disjoint(&slots_b), "a slot held twice");
    assert_eq!(
        slots_a.len() + slots_b.len(),
        SHARDS as usize,
        "every slot held"
    );
    assert!(
        !slots_a.is_empty() && !slots_b.is_empty(),
        "both hold slots"
    );
    let (addr_a, addr_b) = (a.storage_addr.to_string(), b.storage_addr.to_string());
    for (name, (url, digest, _)) in &ready {
        let slot = slot_of(&ns, name, SHARDS);
        let want = if slots_a.contains(&slot) {
            &addr_a
        } else {
            &addr_b
        };
        assert!(
            url.contains(want.as_str()),
            "{name} (slot {slot}) served from {url}, not {want}"
        );
        let bytes = download(url).await;
        assert_eq!(&format!("sha256:{:x}", Sha256::digest(&bytes)), digest);
    }

    // SIGKILL replica a: its GitRepositories are taken over by b.
    let orphans: Vec<String> = ready
        .keys()
        .filter(|n| slots_a.contains(&slot_of(&ns, n, SHARDS)))
        .cloned()
        .collect();
    a.source.child.kill().unwrap();
    a.source.child.wait().unwrap();
    let killed = Instant::now();
    let token = format!("takeover-{}", rflux_e2e::random_suffix(6));
    for name in &orphans {
        let patch =
            json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let taken = wait_for(TIMEOUT, "the orphans handled by replica b", || async {
        let arts = artifacts(&api).await;
        let done = orphans.iter().all(|n| {
            arts.get(n).is_some_and(|(url, _, handled)| {
                handled.as_deref() == Some(token.as_str()) && url.contains(addr_b.as_str())
            })
        });
        Ok(done.then_some(arts))
    })
    .await;
    let taken = match taken {
        Ok(t) => t,
        Err(e) => panic!("{e}\n{}", b.log_tails(40)),
    };
    println!(
        "MEASURE takeover of {} GitRepositories after SIGKILL: {:.2}s (lease 10s)",
        orphans.len(),
        killed.elapsed().as_secs_f64()
    );
    for name in &orphans {
        let (url, digest, _) = &taken[name];
        let bytes = download(url).await;
        assert_eq!(&format!("sha256:{:x}", Sha256::digest(&bytes)), digest);
    }
    let slots_b = wait_for(Duration::from_secs(30), "b reports every slot", || async {
        let s = owned_slots(&b).await;
        Ok((s.len() == SHARDS as usize).then_some(s))
    })
    .await
    .unwrap();
    assert_eq!(slots_b.len(), SHARDS as usize);
    drop(a);
    drop(b);
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let _ = nss.delete(&ns, &Default::default()).await;
}
