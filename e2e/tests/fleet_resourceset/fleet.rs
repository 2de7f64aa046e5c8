//! The objects of the fleet scenario (providers, ResourceSets, the Git tree) and what the test
//! reads back from the clusters (the applied ConfigMap on a spoke, Kustomization and
//! ResourceSet states).

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use rflux_common::api::kustomization::Kustomization;
use rflux_common::api::resourceset::ResourceSet;
use rflux_e2e::ControlPlane;
use serde_json::{Map, Value, json};

/// The applied ConfigMap's name on every spoke.
pub const CONFIG: &str = "fleet-config";

/// The Git tree: a ConfigMap with the per-cluster values Flux's `postBuild` substitutes
/// (`${cluster}`, `${region}`, `${environment}`), and a ServiceAccount.
pub fn manifests(version: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {CONFIG}\ndata:\n  \
         cluster: ${{cluster}}\n  region: ${{region}}\n  environment: ${{environment}}\n  \
         version: {version}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  \
         name: fleet-app\n"
    )
}

/// A Static ResourceSetInputProvider for one spoke: labelled `environment` and `region`, its
/// `defaultValues` naming the cluster and region.
pub fn provider(
    name: &str,
    ns: &str,
    environment: &str,
    region: &str,
    watch: &Map<String, Value>,
) -> Value {
    let mut labels = watch.clone();
    labels.insert("environment".into(), json!(environment));
    labels.insert("region".into(), json!(region));
    json!({
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSetInputProvider",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"type": "Static", "defaultValues": {"cluster": name, "region": region}}
    })
}

/// The ResourceSet of one environment: the providers labelled `environment: <env>`, one
/// Kustomization per cluster applied through `<cluster>-kubeconfig`, region from the inputs.
/// `commonMetadata` carries the controllers' watch label (the harness only reconciles
/// labelled objects).
pub fn resource_set(env: &str, ns: &str, watch: &Map<String, Value>) -> Value {
    let template = format!(
        r#"apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {env}-<< inputs.cluster >>
  namespace: {ns}
spec:
  interval: 1h
  retryInterval: 2s
  timeout: 30s
  prune: true
  wait: true
  path: ./deploy
  targetNamespace: {ns}
  sourceRef:
    kind: GitRepository
    name: fleet
  kubeConfig:
    secretRef:
      name: << inputs.cluster >>-kubeconfig
  postBuild:
    substitute:
      cluster: << inputs.cluster | quote >>
      region: << inputs.region | quote >>
      environment: {env}
"#
    );
    json!({
        "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
        "metadata": {"name": env, "namespace": ns, "labels": watch},
        "spec": {
            "inputsFrom": [{"selector": {"matchLabels": {"environment": env}}}],
            "commonMetadata": {"labels": watch},
            "resourcesTemplate": template
        }
    })
}

/// Creates namespace `ns` on `client`'s cluster.
pub async fn create_ns(client: &Client, ns: &str) {
    let nss: Api<Namespace> = Api::all(client.clone());
    let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    nss.create(&PostParams::default(), &obj).await.unwrap();
}

/// Stores `spoke`'s kubeconfig (a client certificate of user `user`) on the hub as Secret
/// `<cluster>-kubeconfig`, key `value`.
pub async fn kubeconfig_secret(secrets: &Api<Secret>, spoke: &ControlPlane, cluster: &str) {
    let user = format!("hub-{cluster}");
    let path = spoke.user_kubeconfig(&user, &["system:masters"]).unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{cluster}-kubeconfig")},
        "stringData": {"value": text}
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
}

/// The applied ConfigMap on a spoke, as the test sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub uid: String,
    pub data: std::collections::BTreeMap<String, String>,
    /// The Kustomization named by its owner labels.
    pub owner: String,
}

impl Applied {
    pub fn get(&self, key: &str) -> &str {
        self.data.get(key).map_or("", String::as_str)
    }
}

/// The live, not terminating, [`CONFIG`] ConfigMap; `None` when absent or unreachable.
pub async fn applied(cms: &Api<ConfigMap>) -> Option<Applied> {
    let cm = cms.get_opt(CONFIG).await.ok().flatten()?;
    if cm.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let owner = cm
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kustomize.toolkit.fluxcd.io/name"))
        .cloned()
        .unwrap_or_default();
    Some(Applied {
        uid: cm.metadata.uid.clone().unwrap_or_default(),
        data: cm.data.unwrap_or_default(),
        owner,
    })
}

/// `lastAppliedRevision` of a Kustomization.
pub fn applied_rev(ks: &Kustomization) -> Option<&str> {
    ks.status.as_ref()?.last_applied_revision.as_deref()
}

/// The Ready condition of a ResourceSet: (status, reason, message).
pub fn rs_ready(rs: &ResourceSet) -> Option<(String, String, String)> {
    rs.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The inventory ids of a ResourceSet.
pub fn rs_inventory(rs: &ResourceSet) -> Vec<String> {
    rs.status
        .as_ref()
        .and_then(|s| s.inventory.as_ref())
        .map(|i| i.entries.iter().map(|e| e.id.clone()).collect())
        .unwrap_or_default()
}
