//! The options of an apply ([`ApplyOptions`]) and the claim check it may be given.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::AppliedCache;
use crate::drift::DriftIgnoreRule;
use crate::object::ObjectRef;
use crate::owner::Owner;

/// Options for [`crate::apply_all`].
#[derive(Clone)]
pub struct ApplyOptions {
    /// The owner: field manager, owner labels and annotation keys.
    pub owner: Owner,
    /// Recreate objects on immutable-field errors (`spec.force`).
    pub force: bool,
    /// Objects recreated on immutable-field errors as if they carried the force annotation
    /// (`<group>/force: enabled`), without writing it: Argo's `Replace=true`/`Force=true`
    /// sync options (issue 17). Empty unless a Kustomization opts in to Argo semantics.
    pub force_objects: Arc<HashSet<ObjectRef>>,
    /// `--custom-apply-stage-kinds` as `(group, kind)` pairs.
    pub custom_stage_kinds: Vec<(String, String)>,
    /// `--override-manager` names taken over like kubectl's.
    pub override_managers: Vec<String>,
    /// Timeout for the waits after the definition stages and for recreations (Flux: 60s).
    pub wait_timeout: Duration,
    /// Drift ignore rules, compiled with [`super::compile_ignore_rules`].
    pub ignore: Vec<DriftIgnoreRule>,
    /// `--concurrent-ssa`: objects planned (GET, dry-run, drift check) concurrently.
    pub concurrency: usize,
    /// What remembers the applied objects: objects it knows to be as last applied are not
    /// read, dry-run or applied again, and every object applied or verified is recorded in it.
    pub cache: Option<Arc<dyn AppliedCache>>,
    /// Mixed into the cache's desired-state hashes: the settings besides the object that
    /// change how it is applied (force, ignore rules, impersonated user...).
    pub cache_salt: u64,
    /// Refuse objects another owner holds ([`super::claims`]); off is Flux's behaviour
    /// (take everything over).
    pub refuse_conflicts: bool,
    /// The owner asks to take over what others hold (`<group>/takeover: enabled` on it).
    pub takeover: bool,
    /// Tells whether another owner of our kind still holds an object its labels give it.
    pub claims: Option<Arc<dyn ClaimCheck>>,
    /// Log the change set grouped by action (`GroupChangeLog`), not object by object.
    pub group_log: bool,
}

/// Whether another owner of our kind (named by the labels of a live object) still holds it:
/// it exists, is not being deleted and lists the object. Stale labels are no claim.
pub trait ClaimCheck: Send + Sync {
    /// Whether `namespace/name` still holds `id`.
    fn holds<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        id: &'a ObjectRef,
    ) -> futures::future::BoxFuture<'a, bool>;
}

impl std::fmt::Debug for ApplyOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApplyOptions")
            .field("owner", &self.owner)
            .field("force", &self.force)
            .field("force_objects", &self.force_objects.len())
            .field("custom_stage_kinds", &self.custom_stage_kinds)
            .field("override_managers", &self.override_managers)
            .field("wait_timeout", &self.wait_timeout)
            .field("ignore", &self.ignore.len())
            .field("concurrency", &self.concurrency)
            .field("cache", &self.cache.is_some())
            .field("refuse_conflicts", &self.refuse_conflicts)
            .field("takeover", &self.takeover)
            .finish()
    }
}

impl ApplyOptions {
    /// Defaults for an owner.
    pub fn new(owner: Owner) -> Self {
        ApplyOptions {
            owner,
            force: false,
            force_objects: Arc::default(),
            custom_stage_kinds: Vec::new(),
            override_managers: Vec::new(),
            wait_timeout: Duration::from_secs(60),
            ignore: Vec::new(),
            concurrency: 4,
            cache: None,
            cache_salt: 0,
            refuse_conflicts: false,
            takeover: false,
            claims: None,
            group_log: false,
        }
    }
}
