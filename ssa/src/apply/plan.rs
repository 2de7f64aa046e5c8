//! The pure decisions of a stage's writes when the [`super::AppliedCache`] knows objects to be
//! absent: which objects skip the dry-run and are created at once, in which order the writes
//! run, whether an apply response shows a creation, and what a failed create rolls back.
//!
//! The rule "nothing is applied half-way" holds: the objects that may exist are dry-run first
//! (any failure stops the stage before a write); then the known-absent ones are created without
//! a dry-run; a failed create deletes what this attempt created (and nothing else) and stops the
//! stage before any update; only then are the updates applied.

use serde_json::Value;

use crate::object::ObjectRef;
use crate::owner::Owner;

/// How one object of a stage reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// GET (unless known absent), dry-run, drift check, then apply if needed.
    DryRunFirst,
    /// Known absent: applied (created) without a GET or a dry-run.
    CreateDirect,
}

/// The route of an object: created directly when the cache knows it absent. The create is a
/// server-side apply without force, so it can never take over fields another manager holds:
/// if the object exists after all (without our labels) with such fields, the apply conflicts
/// and the object takes the full path ([`create_outcome`]).
pub fn route(known_absent: bool) -> Route {
    if known_absent {
        Route::CreateDirect
    } else {
        Route::DryRunFirst
    }
}

/// What a direct create's response says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    /// This apply created the object.
    Created,
    /// The object existed (without our labels); the apply merged our fields without
    /// conflict. Its claims are checked as on the full path.
    Existed,
    /// The object exists with fields another manager holds (409): the full path decides.
    Conflict,
    /// Refused (validation, admission...): the stage fails with this error.
    Failed,
}

/// The outcome of a direct create from its response (`Ok`) or the HTTP code of its error.
pub fn create_outcome(response: Result<&Value, u16>, manager: &str) -> CreateOutcome {
    match response {
        Ok(v) if created_by_apply(v, manager) => CreateOutcome::Created,
        Ok(_) => CreateOutcome::Existed,
        Err(409) => CreateOutcome::Conflict,
        Err(_) => CreateOutcome::Failed,
    }
}

/// The write order of a stage whose objects are `creates` (true: created directly) in stage
/// order: the indexes of the creates first, then those of the updates, each in stage order.
pub fn write_order(creates: &[bool]) -> (Vec<usize>, Vec<usize>) {
    let (c, u): (Vec<usize>, Vec<usize>) = (0..creates.len()).partition(|i| creates[*i]);
    (c, u)
}

/// Whether the server-side apply that returned `response` created the object: every managed
/// fields entry is the `Apply` of `manager` (an object that existed before carries the entries
/// of whoever wrote it, or ours from an earlier apply with a different operation). An object
/// that existed is reported `configured` and never rolled back.
pub fn created_by_apply(response: &Value, manager: &str) -> bool {
    let Some(entries) = response
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return false;
    };
    !entries.is_empty()
        && entries.iter().all(|e| {
            e.get("manager").and_then(Value::as_str) == Some(manager)
                && e.get("operation").and_then(Value::as_str) == Some("Apply")
        })
}

/// The object a direct create found (`response`) as it was before: the tracker did not see it
/// with our labels, so it had none; the owner labels our apply added are taken off, so its
/// claims ([`crate::claims::marked_claim`]) are judged as on the full path.
pub fn before_our_labels(response: &Value, owner: &Owner) -> Value {
    let mut prior = response.clone();
    if let Some(labels) = prior
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(&owner.name_label());
        labels.remove(&owner.namespace_label());
    }
    prior
}

/// An object a create of this attempt made: what a rollback deletes (by uid precondition, so
/// an object someone recreated meanwhile is left alone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    /// The object.
    pub object: ObjectRef,
    /// Its uid as the create returned it.
    pub uid: String,
}

/// The record of a create for the rollback: `Some` when the response shows this apply created
/// the object and gives its uid; `None` for an object that existed (never deleted).
pub fn created_record(object: &ObjectRef, response: &Value, manager: &str) -> Option<Created> {
    if !created_by_apply(response, manager) {
        return None;
    }
    let uid = response
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())?;
    Some(Created {
        object: object.clone(),
        uid: uid.to_string(),
    })
}

/// What a failed create deletes: the objects created so far in this attempt, last first.
pub fn rollback_targets(created: &[Created]) -> Vec<Created> {
    created.iter().rev().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str) -> ObjectRef {
        ObjectRef::of("v1", "ConfigMap", "apps", name)
    }

    #[test]
    fn known_absent_objects_are_created_directly() {
        assert_eq!(route(true), Route::CreateDirect);
        assert_eq!(route(false), Route::DryRunFirst);
    }

    #[test]
    fn a_direct_create_tells_created_existed_conflict_or_failure() {
        let fresh = json!({"metadata": {"uid": "u1", "managedFields": [
            {"manager": "m", "operation": "Apply"}]}});
        let existed = json!({"metadata": {"uid": "u1", "managedFields": [
            {"manager": "m", "operation": "Apply"}, {"manager": "helm", "operation": "Update"}]}});
        assert_eq!(create_outcome(Ok(&fresh), "m"), CreateOutcome::Created);
        assert_eq!(create_outcome(Ok(&existed), "m"), CreateOutcome::Existed);
        assert_eq!(create_outcome(Err(409), "m"), CreateOutcome::Conflict);
        assert_eq!(create_outcome(Err(422), "m"), CreateOutcome::Failed);
        assert_eq!(create_outcome(Err(403), "m"), CreateOutcome::Failed);
        assert_eq!(create_outcome(Err(0), "m"), CreateOutcome::Failed);
    }

    #[test]
    fn a_found_object_is_judged_without_the_labels_our_create_added() {
        let owner = crate::owner::test_owner();
        let mut labels = serde_json::Map::new();
        labels.insert(owner.name_label(), json!(owner.name));
        labels.insert(owner.namespace_label(), json!(owner.namespace));
        labels.insert("team".into(), json!("blue"));
        let response = json!({"metadata": {"labels": labels,
            "annotations": {"argocd.argoproj.io/tracking-id": "guestbook:/ConfigMap:apps/x"}}});
        assert!(owner.owns(&response));
        let prior = before_our_labels(&response, &owner);
        assert!(!owner.owns(&prior));
        assert_eq!(prior["metadata"]["labels"], json!({"team": "blue"}));
        assert_eq!(
            prior["metadata"]["annotations"],
            response["metadata"]["annotations"]
        );
        let id = ObjectRef::of("v1", "ConfigMap", "apps", "x");
        assert!(crate::claims::marked_claim(&response, &id, &owner).is_none());
        assert!(crate::claims::marked_claim(&prior, &id, &owner).is_some());
    }

    #[test]
    fn creates_are_written_before_updates_in_stage_order() {
        let (c, u) = write_order(&[false, true, false, true, true]);
        assert_eq!(c, vec![1, 3, 4]);
        assert_eq!(u, vec![0, 2]);
        let (c, u) = write_order(&[]);
        assert!(c.is_empty() && u.is_empty());
    }

    #[test]
    fn an_apply_response_shows_a_creation_by_its_managed_fields() {
        let fresh = json!({"metadata": {"uid": "u1", "managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply"}]}});
        assert!(created_by_apply(&fresh, "kustomize-controller"));
        let existed = json!({"metadata": {"uid": "u1", "managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply"},
            {"manager": "kubectl-client-side-apply", "operation": "Update"}]}});
        assert!(!created_by_apply(&existed, "kustomize-controller"));
        let ours_by_update = json!({"metadata": {"managedFields": [
            {"manager": "kustomize-controller", "operation": "Update"}]}});
        assert!(!created_by_apply(&ours_by_update, "kustomize-controller"));
        assert!(!created_by_apply(
            &json!({"metadata": {"managedFields": []}}),
            "kustomize-controller"
        ));
        assert!(!created_by_apply(
            &json!({"metadata": {}}),
            "kustomize-controller"
        ));
        assert!(!created_by_apply(&fresh, "other"));
    }

    #[test]
    fn only_objects_this_attempt_created_are_rolled_back_last_first() {
        let fresh = |uid: &str| {
            json!({"metadata": {"uid": uid, "managedFields": [
                {"manager": "m", "operation": "Apply"}]}})
        };
        let existed = json!({"metadata": {"uid": "u9", "managedFields": [
            {"manager": "m", "operation": "Apply"}, {"manager": "kubectl", "operation": "Update"}]}});
        let mut created = Vec::new();
        created.extend(created_record(&cm("a"), &fresh("u1"), "m"));
        created.extend(created_record(&cm("b"), &existed, "m"));
        created.extend(created_record(&cm("c"), &fresh("u3"), "m"));
        // No uid: cannot be deleted safely, so it is not a rollback target.
        created.extend(created_record(
            &cm("d"),
            &json!({"metadata": {"managedFields": [{"manager": "m", "operation": "Apply"}]}}),
            "m",
        ));
        let targets = rollback_targets(&created);
        assert_eq!(
            targets,
            vec![
                Created {
                    object: cm("c"),
                    uid: "u3".into()
                },
                Created {
                    object: cm("a"),
                    uid: "u1".into()
                },
            ]
        );
    }
}
