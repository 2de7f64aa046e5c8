//! Argo's task order (§1.3): the sort key, the kind rank, the two dependency fix-ups.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::task::Task;

/// Argo's kind rank (Helm's install order), first to last. The match is on the kind only,
/// whatever the group; every other kind, custom resources included, ranks after all of these.
pub const KIND_ORDER: [&str; 35] = [
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
];

/// A kind's rank: its position in [`KIND_ORDER`], or `KIND_ORDER.len()` for every other kind.
pub fn kind_rank(kind: &str) -> usize {
    KIND_ORDER
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(KIND_ORDER.len())
}

/// Argo's sort key: phase, wave, kind rank, name. Argo's sort is not stable, so tasks with
/// equal keys have no defined order there; we break ties by namespace, group, kind and input
/// position, so that the same input always gives the same plan.
pub fn compare(a: &Task, b: &Task) -> Ordering {
    a.phase
        .cmp(&b.phase)
        .then_with(|| a.wave.cmp(&b.wave))
        .then_with(|| kind_rank(&a.kind).cmp(&kind_rank(&b.kind)))
        .then_with(|| a.name.cmp(&b.name))
        .then_with(|| a.namespace.cmp(&b.namespace))
        .then_with(|| a.group.cmp(&b.group))
        .then_with(|| a.kind.cmp(&b.kind))
        .then_with(|| a.source.cmp(&b.source))
}

/// Sorts the tasks, then applies the fix-ups of §1.3, in Argo's order:
/// 1. a core Namespace `N` that sorts after the first task whose object is in `N` moves just
///    before that task and takes its phase and wave;
/// 2. a CRD defining `G/K` that sorts after the first object of group `G` and kind `K` moves
///    just before it and takes its phase and wave.
///
/// Prune tasks take part in neither fix-up.
pub fn sort(tasks: &mut Vec<Task>) {
    tasks.sort_by(compare);
    adjust(
        tasks,
        |t| t.is_namespace().then(|| t.name.clone()),
        |t| (!t.ref_namespace.is_empty()).then(|| t.ref_namespace.clone()),
    );
    adjust(
        tasks,
        |t| t.defines.clone(),
        |t| Some(format!("{}/{}", t.group, t.kind)),
    );
}

/// One fix-up pass: `dependency` gives the key a task provides, `reference` the key it needs.
/// A task that provides a key is never counted as needing one.
fn adjust(
    tasks: &mut Vec<Task>,
    dependency: impl Fn(&Task) -> Option<String>,
    reference: impl Fn(&Task) -> Option<String>,
) {
    // The position of the first task needing each key (kept up to date as tasks move).
    let mut first: HashMap<String, usize> = HashMap::new();
    for i in 0..tasks.len() {
        let Some(task) = tasks.get(i) else { break };
        if task.is_prune() {
            continue;
        }
        if let Some(key) = dependency(task) {
            let Some(&at) = first.get(&key) else { continue };
            let Some((phase, wave)) = tasks.get(at).map(|t| (t.phase, t.wave)) else {
                continue;
            };
            let mut moved = tasks.remove(i);
            moved.phase = phase;
            moved.wave = wave;
            tasks.insert(at, moved);
            for pos in first.values_mut() {
                if *pos >= at {
                    *pos += 1;
                }
            }
        } else if let Some(key) = reference(task) {
            first.entry(key).or_insert(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_rank_follows_the_spec_list() {
        assert_eq!(kind_rank("Namespace"), 0);
        assert!(kind_rank("ConfigMap") < kind_rank("CustomResourceDefinition"));
        assert!(kind_rank("CustomResourceDefinition") < kind_rank("ClusterRole"));
        assert!(kind_rank("Service") < kind_rank("Deployment"));
        assert!(kind_rank("Job") < kind_rank("CronJob"));
        assert!(kind_rank("IngressClass") < kind_rank("Ingress"));
        assert_eq!(kind_rank("APIService"), KIND_ORDER.len() - 1);
    }

    #[test]
    fn unlisted_kinds_rank_last_together() {
        // Custom resources, and listed-looking kinds Argo does not list.
        for kind in [
            "Certificate",
            "PriorityClass",
            "MutatingWebhookConfiguration",
            "namespace",
        ] {
            assert_eq!(kind_rank(kind), KIND_ORDER.len(), "{kind}");
        }
    }

    #[test]
    fn the_list_has_no_duplicates() {
        let mut kinds = KIND_ORDER.to_vec();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), KIND_ORDER.len());
    }
}
