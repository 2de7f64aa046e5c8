//! Flux Operator's `flux_resourceset_info` gauge: one series per ResourceSet, value 1, with its
//! Ready status and reason, whether it is suspended (`reconcile: disabled`), its object count
//! and `lastAppliedRevision` (the labels of flux-operator's reporter, so its dashboards work).

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;
use prometheus::{GaugeVec, Opts, Registry};
use rflux_common::api::resourceset::{ResourceSet, ResourceSetStatus};

const LABELS: [&str; 9] = [
    "uid",
    "kind",
    "name",
    "exported_namespace",
    "ready",
    "reason",
    "suspended",
    "resources",
    "revision",
];

/// The gauge and the label values last set per ResourceSet (to drop the old series).
#[derive(Debug)]
pub struct InfoMetric {
    /// `None` only if the (constant) options were refused, which would be a bug.
    gauge: Option<GaugeVec>,
    last: Mutex<HashMap<(String, String), Vec<String>>>,
}

impl Default for InfoMetric {
    fn default() -> Self {
        let opts = Opts::new(
            "flux_resourceset_info",
            "The current status of a Flux Operator ResourceSet.",
        );
        let gauge = GaugeVec::new(opts, &LABELS)
            .map_err(|e| tracing::error!(error = %e, "flux_resourceset_info unavailable"))
            .ok();
        InfoMetric {
            gauge,
            last: Mutex::new(HashMap::new()),
        }
    }
}

/// The label values of `rs` with `status` (pure).
pub fn label_values(rs: &ResourceSet, status: &ResourceSetStatus) -> Vec<String> {
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready");
    vec![
        rs.uid().unwrap_or_default(),
        "ResourceSet".to_string(),
        rs.name_any(),
        rs.namespace().unwrap_or_default(),
        ready
            .map(|c| c.status.clone())
            .unwrap_or_else(|| "Unknown".into()),
        ready.map(|c| c.reason.clone()).unwrap_or_default(),
        if rs.is_disabled() { "True" } else { "False" }.to_string(),
        status
            .inventory
            .as_ref()
            .map_or(0, |i| i.entries.len())
            .to_string(),
        status.last_applied_revision.clone().unwrap_or_default(),
    ]
}

impl InfoMetric {
    /// Registers the gauge (once per process).
    pub fn register(&self, registry: &Registry) {
        let Some(gauge) = &self.gauge else {
            return;
        };
        if let Err(e) = registry.register(Box::new(gauge.clone())) {
            tracing::debug!(error = %e, "flux_resourceset_info not registered");
        }
    }

    /// Sets the series of `rs`, replacing its previous one.
    pub fn record(&self, rs: &ResourceSet, status: &ResourceSetStatus) {
        let Some(gauge) = &self.gauge else {
            return;
        };
        let values = label_values(rs, status);
        let key = (rs.namespace().unwrap_or_default(), rs.name_any());
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(old) = last.insert(key, values.clone())
            && old != values
        {
            let refs: Vec<&str> = old.iter().map(String::as_str).collect();
            let _ = gauge.remove_label_values(&refs);
        }
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        if let Ok(g) = gauge.get_metric_with_label_values(&refs) {
            g.set(1.0);
        }
    }

    /// Drops the series of a deleted ResourceSet.
    pub fn delete(&self, namespace: &str, name: &str) {
        let Some(gauge) = &self.gauge else {
            return;
        };
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(old) = last.remove(&(namespace.to_string(), name.to_string())) {
            let refs: Vec<&str> = old.iter().map(String::as_str).collect();
            let _ = gauge.remove_label_values(&refs);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use prometheus::Encoder;
    use serde_json::json;

    fn text(reg: &Registry) -> String {
        let mut buf = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&reg.gather(), &mut buf)
            .unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn one_series_per_resourceset_replaced_on_change_and_dropped_on_delete() {
        let reg = Registry::new();
        let m = InfoMetric::default();
        m.register(&reg);
        let rs: ResourceSet = serde_json::from_value(json!({
            "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
            "metadata": {"name": "apps", "namespace": "ns", "uid": "u1"}, "spec": {}}))
        .unwrap();
        let mut status: ResourceSetStatus = serde_json::from_value(json!({
            "conditions": [{"type": "Ready", "status": "False", "reason": "BuildFailed",
                "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .unwrap();
        m.record(&rs, &status);
        assert!(text(&reg).contains(r#"flux_resourceset_info{exported_namespace="ns",kind="ResourceSet",name="apps",ready="False",reason="BuildFailed",resources="0",revision="",suspended="False",uid="u1"} 1"#), "{}", text(&reg));
        status.last_applied_revision = Some("sha256:ab".into());
        status.conditions.as_mut().unwrap()[0].status = "True".into();
        status.conditions.as_mut().unwrap()[0].reason = "ReconciliationSucceeded".into();
        m.record(&rs, &status);
        let t = text(&reg);
        assert_eq!(t.matches("flux_resourceset_info{").count(), 1, "{t}");
        assert!(
            t.contains(r#"reason="ReconciliationSucceeded""#)
                && t.contains(r#"revision="sha256:ab""#)
        );
        m.delete("ns", "apps");
        assert!(!text(&reg).contains("flux_resourceset_info{"));
    }
}
