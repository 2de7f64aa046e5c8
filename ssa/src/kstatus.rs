//! A port of the kstatus rules (cli-utils `pkg/kstatus/status`) plus Flux's custom Job reader:
//! pure functions computing the readiness of an object from its JSON.

use std::fmt;

use serde_json::Value;

/// The kstatus status of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Not yet reconciled to its desired state.
    InProgress,
    /// Reconciliation failed and will not progress without intervention.
    Failed,
    /// Reconciled and ready.
    Current,
    /// Being deleted.
    Terminating,
    /// The object does not exist.
    NotFound,
    /// The status cannot be determined.
    Unknown,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Current => "Current",
            Status::Terminating => "Terminating",
            Status::NotFound => "NotFound",
            Status::Unknown => "Unknown",
        })
    }
}

/// A computed status with its human-readable explanation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusResult {
    /// The status.
    pub status: Status,
    /// Why (kstatus message text).
    pub message: String,
}

fn result(status: Status, message: impl Into<String>) -> StatusResult {
    StatusResult {
        status,
        message: message.into(),
    }
}

fn int(v: &Value, path: &[&str]) -> Option<i64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_i64()
}

fn string<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

/// A status condition as read from `status.conditions`.
struct Cond<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

fn conditions(obj: &Value) -> Vec<Cond<'_>> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|c| Cond {
                    type_: c.get("type").and_then(Value::as_str).unwrap_or(""),
                    status: c.get("status").and_then(Value::as_str).unwrap_or(""),
                    reason: c.get("reason").and_then(Value::as_str).unwrap_or(""),
                    message: c.get("message").and_then(Value::as_str).unwrap_or(""),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn find<'a, 'b>(conds: &'b [Cond<'a>], type_: &str) -> Option<&'b Cond<'a>> {
    conds.iter().find(|c| c.type_ == type_)
}

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// Computes the status of `obj` (a full object as returned by the API server).
pub fn compute(obj: &Value) -> StatusResult {
    if let Some(r) = generic(obj) {
        return r;
    }
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let group = group_of(obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
    match (group, kind) {
        ("apps", "Deployment") => deployment(obj),
        ("apps", "StatefulSet") => statefulset(obj),
        ("apps", "DaemonSet") => daemonset(obj),
        ("apps", "ReplicaSet") => replicaset(obj),
        ("policy", "PodDisruptionBudget") => pdb(obj),
        ("batch", "Job") => job(obj),
        ("batch", "CronJob") | ("", "Secret") | ("", "ConfigMap") => {
            result(Status::Current, "Resource is always ready")
        }
        ("", "Pod") => pod(obj),
        ("", "PersistentVolumeClaim") => pvc(obj),
        ("", "Service") => service(obj),
        ("", "Namespace") => namespace(obj),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(obj),
        _ => ready_condition(obj),
    }
}

/// Rules shared by every kind: deletion, observedGeneration, Reconciling and Stalled.
fn generic(obj: &Value) -> Option<StatusResult> {
    if obj
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return Some(result(
            Status::Terminating,
            "Resource scheduled for deletion",
        ));
    }
    if let Some(observed) = int(obj, &["status", "observedGeneration"]) {
        let generation = int(obj, &["metadata", "generation"]).unwrap_or(0);
        if observed != generation {
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
            return Some(result(
                Status::InProgress,
                format!(
                    "{kind} generation is {generation}, but latest observed generation is {observed}"
                ),
            ));
        }
    }
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "Reconciling").filter(|c| c.status == "True") {
        return Some(result(Status::InProgress, c.message));
    }
    if let Some(c) = find(&conds, "Stalled").filter(|c| c.status == "True") {
        return Some(result(Status::Failed, c.message));
    }
    None
}

fn deployment(obj: &Value) -> StatusResult {
    let conds = conditions(obj);
    let mut progressing = false;
    let mut available = false;
    for c in &conds {
        match (c.type_, c.status) {
            ("Progressing", "False") if c.reason == "ProgressDeadlineExceeded" => {
                return result(Status::Failed, "Progress deadline exceeded");
            }
            ("Progressing", "True") if c.reason == "NewReplicaSetAvailable" => progressing = true,
            ("Available", "True") => available = true,
            _ => {}
        }
    }
    let spec = int(obj, &["spec", "replicas"]).unwrap_or(1);
    let status = int(obj, &["status", "replicas"]).unwrap_or(0);
    let updated = int(obj, &["status", "updatedReplicas"]).unwrap_or(0);
    let ready = int(obj, &["status", "readyReplicas"]).unwrap_or(0);
    let avail = int(obj, &["status", "availableReplicas"]).unwrap_or(0);
    if spec > status {
        return result(Status::InProgress, format!("Replicas: {status}/{spec}"));
    }
    if spec > updated {
        return result(Status::InProgress, format!("Updated: {updated}/{spec}"));
    }
    if status > spec {
        return result(
            Status::InProgress,
            format!("Pending termination: {}", status - spec),
        );
    }
    if updated > avail {
        return result(Status::InProgress, format!("Available: {avail}/{updated}"));
    }
    if spec > ready {
        return result(Status::InProgress, format!("Ready: {ready}/{spec}"));
    }
    if !progressing {
        return result(Status::InProgress, "ReplicaSet not Available");
    }
    if !available {
        return result(Status::InProgress, "Deployment not Available");
    }
    result(
        Status::Current,
        format!("Deployment is available. Replicas: {status}"),
    )
}

fn statefulset(obj: &Value) -> StatusResult {
    if string(obj, &["spec", "updateStrategy", "type"]) == Some("OnDelete") {
        return result(
            Status::Current,
            "StatefulSet is using the ondelete update strategy",
        );
    }
    let spec = int(obj, &["spec", "replicas"]).unwrap_or(1);
    let status = int(obj, &["status", "replicas"]).unwrap_or(0);
    let ready = int(obj, &["status", "readyReplicas"]).unwrap_or(0);
    let current = int(obj, &["status", "currentReplicas"]).unwrap_or(0);
    let updated = int(obj, &["status", "updatedReplicas"]).unwrap_or(0);
    let partition = int(
        obj,
        &["spec", "updateStrategy", "rollingUpdate", "partition"],
    )
    .unwrap_or(-1);
    if spec > status {
        return result(Status::InProgress, format!("Replicas: {status}/{spec}"));
    }
    if spec > ready {
        return result(Status::InProgress, format!("Ready: {ready}/{spec}"));
    }
    if status > spec {
        return result(
            Status::InProgress,
            format!("Pending termination: {}", status - spec),
        );
    }
    if partition != -1 {
        let want = (spec - partition).max(0);
        if updated < want {
            return result(Status::InProgress, format!("updated: {updated}/{want}"));
        }
        return result(
            Status::Current,
            format!("Partition rollout complete. updated: {updated}"),
        );
    }
    if spec > current {
        return result(Status::InProgress, format!("current: {current}/{spec}"));
    }
    let cur_rev = string(obj, &["status", "currentRevision"]).unwrap_or("");
    let upd_rev = string(obj, &["status", "updateRevision"]).unwrap_or("");
    if cur_rev != upd_rev {
        return result(
            Status::InProgress,
            format!("Waiting for updated revision {upd_rev} to match current {cur_rev}"),
        );
    }
    result(
        Status::Current,
        format!("All replicas scheduled as expected. Replicas: {status}"),
    )
}

fn daemonset(obj: &Value) -> StatusResult {
    if int(obj, &["status", "observedGeneration"]).is_none() {
        return result(Status::InProgress, "Missing .status.observedGeneration");
    }
    let desired = int(obj, &["status", "desiredNumberScheduled"]).unwrap_or(0);
    let current = int(obj, &["status", "currentNumberScheduled"]).unwrap_or(0);
    let updated = int(obj, &["status", "updatedNumberScheduled"]).unwrap_or(0);
    let available = int(obj, &["status", "numberAvailable"]).unwrap_or(0);
    let ready = int(obj, &["status", "numberReady"]).unwrap_or(0);
    if desired > current {
        return result(Status::InProgress, format!("Current: {current}/{desired}"));
    }
    if desired > updated {
        return result(Status::InProgress, format!("Updated: {updated}/{desired}"));
    }
    if desired > available {
        return result(
            Status::InProgress,
            format!("Available: {available}/{desired}"),
        );
    }
    if desired > ready {
        return result(Status::InProgress, format!("Ready: {ready}/{desired}"));
    }
    result(
        Status::Current,
        format!("All replicas scheduled as expected. Replicas: {desired}"),
    )
}

fn replicaset(obj: &Value) -> StatusResult {
    let conds = conditions(obj);
    if find(&conds, "ReplicaFailure").is_some_and(|c| c.status == "True") {
        return result(Status::InProgress, "Replica Failure condition. Check Pods");
    }
    let spec = int(obj, &["spec", "replicas"]).unwrap_or(1);
    let status = int(obj, &["status", "replicas"]).unwrap_or(0);
    let labelled = int(obj, &["status", "fullyLabeledReplicas"]).unwrap_or(0);
    let available = int(obj, &["status", "availableReplicas"]).unwrap_or(0);
    let ready = int(obj, &["status", "readyReplicas"]).unwrap_or(0);
    if spec > labelled {
        return result(Status::InProgress, format!("Labelled: {labelled}/{spec}"));
    }
    if spec > available {
        return result(Status::InProgress, format!("Available: {available}/{spec}"));
    }
    if spec > ready {
        return result(Status::InProgress, format!("Ready: {ready}/{spec}"));
    }
    if status > spec {
        return result(
            Status::InProgress,
            format!("Pending termination: {}", status - spec),
        );
    }
    result(
        Status::Current,
        format!("ReplicaSet is available. Replicas: {status}"),
    )
}

fn pdb(obj: &Value) -> StatusResult {
    if int(obj, &["status", "observedGeneration"]).is_none() {
        return result(Status::InProgress, "Missing .status.observedGeneration");
    }
    let healthy = int(obj, &["status", "currentHealthy"]).unwrap_or(0);
    let desired = int(obj, &["status", "desiredHealthy"]).unwrap_or(0);
    if desired > healthy {
        return result(
            Status::InProgress,
            format!("Budget not met. healthy replicas: {healthy}/{desired}"),
        );
    }
    let allowed = int(obj, &["status", "disruptionsAllowed"]).unwrap_or(0);
    result(
        Status::Current,
        format!("Budget is met. Replicas: {healthy}/{desired}. AllowedDisruptions: {allowed}"),
    )
}

/// Flux's custom Job reader: Complete is Current, Failed is Failed, suspended is Current.
fn job(obj: &Value) -> StatusResult {
    let conds = conditions(obj);
    let succeeded = int(obj, &["status", "succeeded"]).unwrap_or(0);
    let failed = int(obj, &["status", "failed"]).unwrap_or(0);
    let active = int(obj, &["status", "active"]).unwrap_or(0);
    let completions = int(obj, &["spec", "completions"]).unwrap_or(1);
    if find(&conds, "Failed").is_some_and(|c| c.status == "True") {
        let msg = find(&conds, "Failed").map_or("", |c| c.message);
        return result(
            Status::Failed,
            format!("Job Failed. failed: {failed}: {msg}"),
        );
    }
    if find(&conds, "Complete").is_some_and(|c| c.status == "True") {
        return result(
            Status::Current,
            format!("Job Completed. succeeded: {succeeded}/{completions}"),
        );
    }
    if find(&conds, "Suspended").is_some_and(|c| c.status == "True")
        || obj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true)
    {
        return result(Status::Current, "Job is suspended");
    }
    result(
        Status::InProgress,
        format!("Job in progress. success:{succeeded}, active: {active}, failed: {failed}"),
    )
}

fn pod(obj: &Value) -> StatusResult {
    let conds = conditions(obj);
    match string(obj, &["status", "phase"]).unwrap_or("") {
        "Succeeded" => result(Status::Current, "Pod has completed successfully"),
        "Failed" => result(Status::Failed, "Pod has completed, but not successfully"),
        "Running" => {
            if find(&conds, "Ready").is_some_and(|c| c.status == "True") {
                return result(Status::Current, "Pod is Ready");
            }
            if let Some(msg) = crash_looping(obj) {
                return result(Status::Failed, msg);
            }
            result(Status::InProgress, "Pod is running but is not Ready")
        }
        "Pending" => {
            if let Some(c) = find(&conds, "PodScheduled")
                .filter(|c| c.status == "False" && c.reason == "Unschedulable")
            {
                return result(
                    Status::InProgress,
                    format!("Pod could not be scheduled: {}", c.message),
                );
            }
            result(Status::InProgress, "Pod is in the Pending phase")
        }
        _ => result(Status::InProgress, "Pod phase not available"),
    }
}

fn crash_looping(obj: &Value) -> Option<String> {
    let statuses = obj
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)?;
    statuses.iter().find_map(|s| {
        let reason = s.pointer("/state/waiting/reason").and_then(Value::as_str)?;
        (reason == "CrashLoopBackOff").then(|| {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("");
            format!("Pod container {name} is in CrashLoopBackOff")
        })
    })
}

fn pvc(obj: &Value) -> StatusResult {
    match string(obj, &["status", "phase"]) {
        Some("Bound") => result(Status::Current, "PVC is Bound"),
        phase => result(
            Status::InProgress,
            format!("PVC is not Bound. phase: {}", phase.unwrap_or("")),
        ),
    }
}

fn service(obj: &Value) -> StatusResult {
    if string(obj, &["spec", "type"]) == Some("LoadBalancer")
        && string(obj, &["spec", "clusterIP"]).unwrap_or("").is_empty()
    {
        return result(Status::InProgress, "ClusterIP not set");
    }
    result(Status::Current, "Service is ready")
}

fn namespace(obj: &Value) -> StatusResult {
    match string(obj, &["status", "phase"]) {
        Some("Terminating") => result(Status::Terminating, "Namespace is terminating"),
        _ => result(Status::Current, "Namespace is active"),
    }
}

fn crd(obj: &Value) -> StatusResult {
    let conds = conditions(obj);
    if let Some(c) = find(&conds, "NamesAccepted").filter(|c| c.status == "False") {
        return result(
            Status::Failed,
            format!("CRD names have not been accepted: {}", c.message),
        );
    }
    if find(&conds, "Established").is_some_and(|c| c.status == "True") {
        return result(Status::Current, "CRD is established");
    }
    result(Status::InProgress, "CRD is not established")
}

/// Generic custom resources: the `Ready` condition decides; no conditions means Current.
fn ready_condition(obj: &Value) -> StatusResult {
    let conds = conditions(obj);
    match find(&conds, "Ready") {
        Some(c) if c.status == "True" => result(Status::Current, "Resource is Ready"),
        Some(c) => result(
            Status::InProgress,
            format!("{}: {}", c.reason, c.message)
                .trim_matches(|ch| ch == ':' || ch == ' ')
                .to_string(),
        ),
        None => result(Status::Current, "Resource is current"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment_fixture(generation: i64, observed: i64, ready: i64, available: bool) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "generation": generation},
            "spec": {"replicas": 2},
            "status": {
                "observedGeneration": observed, "replicas": 2, "updatedReplicas": 2,
                "readyReplicas": ready, "availableReplicas": ready,
                "conditions": [
                    {"type": "Available", "status": if available {"True"} else {"False"},
                     "reason": "MinimumReplicasAvailable", "message": ""},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                     "message": "ReplicaSet \"web-1\" has successfully progressed."}
                ]
            }
        })
    }

    #[test]
    fn deployment_rules() {
        let ok = compute(&deployment_fixture(3, 3, 2, true));
        assert_eq!(ok.status, Status::Current);
        assert_eq!(ok.message, "Deployment is available. Replicas: 2");

        let stale = compute(&deployment_fixture(4, 3, 2, true));
        assert_eq!(stale.status, Status::InProgress);
        assert_eq!(
            stale.message,
            "Deployment generation is 4, but latest observed generation is 3"
        );

        let not_ready = compute(&deployment_fixture(1, 1, 1, true));
        assert_eq!(not_ready.status, Status::InProgress);
        assert_eq!(not_ready.message, "Available: 1/2");

        let unavailable = compute(&deployment_fixture(1, 1, 2, false));
        assert_eq!(unavailable.message, "Deployment not Available");

        let mut deadline = deployment_fixture(1, 1, 0, false);
        deadline["status"]["conditions"][1] = json!({"type": "Progressing", "status": "False",
            "reason": "ProgressDeadlineExceeded", "message": "timed out"});
        assert_eq!(compute(&deadline).status, Status::Failed);

        let fresh = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x", "generation": 1}, "spec": {}});
        assert_eq!(compute(&fresh).message, "Replicas: 0/1");
    }

    #[test]
    fn terminating_wins() {
        let mut d = deployment_fixture(1, 1, 2, true);
        d["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(compute(&d).status, Status::Terminating);
    }

    #[test]
    fn statefulset_and_daemonset_rules() {
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "generation": 2},
            "spec": {"replicas": 3},
            "status": {"observedGeneration": 2, "replicas": 3, "readyReplicas": 3,
                "currentReplicas": 3, "updatedReplicas": 3,
                "currentRevision": "db-1", "updateRevision": "db-2"}});
        let r = compute(&sts);
        assert_eq!(r.status, Status::InProgress);
        assert_eq!(
            r.message,
            "Waiting for updated revision db-2 to match current db-1"
        );
        let mut done = sts.clone();
        done["status"]["updateRevision"] = json!("db-1");
        assert_eq!(compute(&done).status, Status::Current);

        let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "generation": 1},
            "status": {"observedGeneration": 1, "desiredNumberScheduled": 2,
                "currentNumberScheduled": 2, "updatedNumberScheduled": 2,
                "numberAvailable": 1, "numberReady": 2}});
        assert_eq!(compute(&ds).message, "Available: 1/2");
        let no_status = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "generation": 1}});
        assert_eq!(compute(&no_status).status, Status::InProgress);
    }

    #[test]
    fn job_pod_pvc_service_crd_rules() {
        let job_obj = |conds: Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                "spec": {"completions": 1},
                "status": {"succeeded": 1, "conditions": conds}})
        };
        assert_eq!(
            compute(&job_obj(json!([{"type": "Complete", "status": "True"}]))).status,
            Status::Current
        );
        assert_eq!(
            compute(&job_obj(json!([{"type": "Failed", "status": "True",
                "message": "BackoffLimitExceeded"}])))
            .status,
            Status::Failed
        );
        assert_eq!(compute(&job_obj(json!([]))).status, Status::InProgress);

        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(compute(&pod).status, Status::Current);
        let crash = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(compute(&crash).status, Status::Failed);

        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"}, "status": {"phase": "Pending"}});
        assert_eq!(compute(&pvc).message, "PVC is not Bound. phase: Pending");

        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1"}});
        assert_eq!(compute(&svc).status, Status::Current);

        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "status": {"conditions": [{"type": "NamesAccepted", "status": "True"},
                                      {"type": "Established", "status": "False"}]}});
        assert_eq!(compute(&crd).status, Status::InProgress);
        let mut est = crd.clone();
        est["status"]["conditions"][1]["status"] = json!("True");
        assert_eq!(compute(&est).status, Status::Current);
    }

    #[test]
    fn custom_resource_conditions() {
        let cr = |conds: Value, gen_: i64, observed: i64| {
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "generation": gen_},
                "status": {"observedGeneration": observed, "conditions": conds}})
        };
        assert_eq!(
            compute(&cr(json!([{"type": "Ready", "status": "True"}]), 1, 1)).status,
            Status::Current
        );
        let not_ready = compute(&cr(
            json!([{"type": "Ready", "status": "False", "reason": "Waiting", "message": "db"}]),
            1,
            1,
        ));
        assert_eq!(not_ready.status, Status::InProgress);
        assert_eq!(not_ready.message, "Waiting: db");
        assert_eq!(
            compute(&cr(json!([{"type": "Stalled", "status": "True"}]), 1, 1)).status,
            Status::Failed
        );
        assert_eq!(
            compute(&cr(
                json!([{"type": "Reconciling", "status": "True"}]),
                1,
                1
            ))
            .status,
            Status::InProgress
        );
        assert_eq!(
            compute(&cr(json!([{"type": "Ready", "status": "True"}]), 2, 1)).status,
            Status::InProgress
        );
        let bare = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"}});
        assert_eq!(compute(&bare).status, Status::Current);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(compute(&cm).status, Status::Current);
    }
}
