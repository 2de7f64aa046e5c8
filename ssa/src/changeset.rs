//! What an apply or a deletion did to each object, in processing order, and Flux's event text
//! for it.

use std::fmt;

use super::claims::Claim;
use super::object::ObjectRef;

/// What happened to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The object did not exist and was created.
    Created,
    /// The object drifted and was patched.
    Configured,
    /// The object matched; nothing was written.
    Unchanged,
    /// The object was deleted.
    Deleted,
    /// The object was skipped (annotations or labels).
    Skipped,
    /// Unknown.
    Unknown,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
            Action::Deleted => "deleted",
            Action::Skipped => "skipped",
            Action::Unknown => "unknown",
        })
    }
}

/// One change-set line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeSetEntry {
    /// The object.
    pub object: ObjectRef,
    /// What happened.
    pub action: Action,
}

impl ChangeSetEntry {
    /// `Kind/ns/name`.
    pub fn subject(&self) -> String {
        self.object.subject()
    }
}

impl fmt::Display for ChangeSetEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.object.subject(), self.action)
    }
}

/// The result of an apply or prune, in processing order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeSet {
    /// Entries in order.
    pub entries: Vec<ChangeSetEntry>,
    /// Objects not applied because another owner holds them (not in `entries`, so neither
    /// in the inventory nor ever pruned by this owner).
    pub refused: Vec<(ObjectRef, Claim)>,
}

impl ChangeSet {
    /// Appends an entry.
    pub fn push(&mut self, object: ObjectRef, action: Action) {
        self.entries.push(ChangeSetEntry { object, action });
    }

    /// Subject → action, for the apply log (Flux's `ToMap`).
    pub fn to_map(&self) -> std::collections::BTreeMap<String, String> {
        self.entries
            .iter()
            .map(|e| (e.subject(), e.action.to_string()))
            .collect()
    }

    /// Action → subjects in order, for the apply log with `GroupChangeLog` (Flux's
    /// `ToGroupedMap`).
    pub fn to_grouped_map(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for e in &self.entries {
            out.entry(e.action.to_string())
                .or_default()
                .push(e.subject());
        }
        out
    }

    /// Records an object another owner holds.
    pub fn refuse(&mut self, object: ObjectRef, claim: Claim) {
        self.refused.push((object, claim));
    }

    /// Appends all entries of `other`.
    pub fn extend(&mut self, other: ChangeSet) {
        self.entries.extend(other.entries);
        self.refused.extend(other.refused);
    }

    /// The action recorded for a subject (`Kind/ns/name`).
    pub fn action_of(&self, subject: &str) -> Option<Action> {
        self.entries
            .iter()
            .find(|e| e.subject() == subject)
            .map(|e| e.action)
    }

    /// Whether anything was created, configured or deleted.
    pub fn has_changes(&self) -> bool {
        self.entries.iter().any(|e| {
            matches!(
                e.action,
                Action::Created | Action::Configured | Action::Deleted
            )
        })
    }

    /// Flux's event body: `<subject> <action>` lines for created, configured and deleted objects.
    pub fn event_message(&self) -> String {
        self.entries
            .iter()
            .filter(|e| {
                matches!(
                    e.action,
                    Action::Created | Action::Configured | Action::Deleted
                )
            })
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The objects in order (for the inventory and health checks).
    pub fn objects(&self) -> impl Iterator<Item = &ObjectRef> {
        self.entries.iter().map(|e| &e.object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_set_messages() {
        let mut cs = ChangeSet::default();
        let obj = |kind: &str, ns: &str, name: &str| ObjectRef {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        };
        cs.push(obj("Namespace", "", "a"), Action::Unchanged);
        cs.push(obj("ConfigMap", "a", "c"), Action::Configured);
        cs.push(obj("Service", "a", "s"), Action::Created);
        cs.push(obj("Secret", "a", "x"), Action::Skipped);
        assert!(cs.has_changes());
        assert_eq!(
            cs.event_message(),
            "ConfigMap/a/c configured\nService/a/s created"
        );
        assert_eq!(cs.action_of("Namespace/a"), Some(Action::Unchanged));
        assert_eq!(cs.entries[3].to_string(), "Secret/a/x skipped");
    }

    #[test]
    fn the_apply_log_maps_by_subject_or_groups_by_action() {
        let obj = |kind: &str, name: &str| ObjectRef {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: "apps".into(),
            name: name.into(),
        };
        let mut c = ChangeSet::default();
        c.push(obj("ConfigMap", "a"), Action::Created);
        c.push(obj("ConfigMap", "b"), Action::Unchanged);
        c.push(obj("Secret", "c"), Action::Created);
        assert_eq!(
            c.to_map().get("ConfigMap/apps/b").map(String::as_str),
            Some("unchanged")
        );
        let grouped = c.to_grouped_map();
        assert_eq!(
            grouped.get("created"),
            Some(&vec![
                "ConfigMap/apps/a".to_string(),
                "Secret/apps/c".to_string()
            ])
        );
        assert_eq!(grouped.len(), 2);
    }
}
