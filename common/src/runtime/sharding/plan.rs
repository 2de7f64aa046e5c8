//! The pure decisions of automatic sharding: which slot an object belongs to, which alive member
//! should own each slot (rendezvous hashing), which members are alive, and what this replica must
//! do with each slot lease. No I/O: the lease loop ([`super::leases`]) feeds them what it read.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;

use crate::runtime::leader::{Decision, decide};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits: stable across releases and platforms (unlike `DefaultHasher`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// splitmix64's finalizer: spreads FNV's weak low bits over the whole word (short keys that
/// differ in one character otherwise land in neighbouring slots and weights).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The slot of the object `namespace/name` among `shards` slots (`shards` 0 counts as 1).
pub fn slot_of(namespace: &str, name: &str, shards: u32) -> u32 {
    let key = format!("{namespace}/{name}");
    let h = mix(fnv1a64(key.as_bytes()));
    u32::try_from(h % u64::from(shards.max(1))).unwrap_or(0)
}

/// The rendezvous weight of `member` for `slot`.
pub fn weight(member: &str, slot: u32) -> u64 {
    let key = format!("{member}\u{0}{slot}");
    mix(fnv1a64(key.as_bytes()))
}

/// The desired owner of `slot`: the member with the highest weight (ties: the smallest name).
/// `None` when there is no member.
pub fn desired_owner(members: &[String], slot: u32) -> Option<&str> {
    members
        .iter()
        .map(|m| (weight(m, slot), m.as_str()))
        .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)))
        .map(|(_, m)| m)
}

/// The desired owner of every slot `0..shards` (rendezvous hashing over `members`; the order of
/// `members` does not matter). Empty members: every entry is `None`.
pub fn assign(members: &[String], shards: u32) -> Vec<Option<String>> {
    (0..shards.max(1))
        .map(|s| desired_owner(members, s).map(str::to_string))
        .collect()
}

/// A member lease as seen by this replica: its spec and when that spec was last seen to change
/// (local monotonic clock, as the leader elector judges expiry).
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The lease spec last read.
    pub spec: LeaseSpec,
    /// When it was last seen to change.
    pub changed_at: Instant,
}

/// Records a fresh read of `spec` into `seen` (keeps `changed_at` when nothing changed).
pub fn observe(seen: &mut BTreeMap<String, Observed>, name: &str, spec: LeaseSpec, now: Instant) {
    match seen.get_mut(name) {
        Some(o) if o.spec == spec => {}
        Some(o) => {
            o.spec = spec;
            o.changed_at = now;
        }
        None => {
            seen.insert(
                name.to_string(),
                Observed {
                    spec,
                    changed_at: now,
                },
            );
        }
    }
}

fn lease_duration(spec: &LeaseSpec, default: Duration) -> Duration {
    spec.lease_duration_seconds
        .filter(|s| *s > 0)
        .map_or(default, |s| {
            Duration::from_secs(u64::from(s.unsigned_abs()))
        })
}

/// The alive members, sorted and de-duplicated: the holders of member leases whose record
/// changed less than its duration ago (a lease with no holder was released: not alive).
pub fn alive_members(
    seen: &BTreeMap<String, Observed>,
    now: Instant,
    default_duration: Duration,
) -> Vec<String> {
    let mut out: Vec<String> = seen
        .values()
        .filter(|o| now < o.changed_at + lease_duration(&o.spec, default_duration))
        .filter_map(|o| o.spec.holder_identity.clone())
        .filter(|h| !h.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What this replica does with one slot lease in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotAction {
    /// Nothing (another member holds or should hold it, or we wait for its holder to let go).
    Idle,
    /// We should own it and it is free: create or take over the lease.
    Acquire(Decision),
    /// We own it and should keep it: renew.
    Renew,
    /// We hold it but another member should own it: stop starting reconciles of its objects,
    /// wait for those in flight, then release the lease.
    Release,
}

/// What to do with every slot (pure). `desired[i]` is the desired owner of slot `i`;
/// `leases[i]` the slot lease as observed (`None`: it does not exist yet).
pub fn plan_slots(
    desired: &[Option<String>],
    leases: &[Option<Observed>],
    identity: &str,
    now: Instant,
    default_duration: Duration,
) -> Vec<SlotAction> {
    desired
        .iter()
        .enumerate()
        .map(|(i, want)| {
            let lease = leases.get(i).and_then(Option::as_ref);
            let ours = want.as_deref() == Some(identity);
            let decision = decide(
                lease.map(|o| &o.spec),
                identity,
                lease.map_or(now, |o| o.changed_at),
                now,
                default_duration,
            );
            match (ours, decision) {
                (true, Decision::Renew) => SlotAction::Renew,
                (true, d @ (Decision::Create | Decision::Acquire)) => SlotAction::Acquire(d),
                (true, Decision::Wait { .. }) => SlotAction::Idle,
                (false, Decision::Renew) => SlotAction::Release,
                (false, _) => SlotAction::Idle,
            }
        })
        .collect()
}

/// A valid object name for the member lease of `identity`: `<controller>-member-<identity>`
/// lowercased, characters outside `[a-z0-9.-]` replaced by `-`, and, when longer than 63
/// characters, cut and suffixed with 8 hex of its FNV-1a hash (names stay distinct).
pub fn member_lease_name(controller: &str, identity: &str) -> String {
    let raw = format!("{controller}-member-{identity}").to_lowercase();
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.len() > 63 {
        let h = fnv1a64(raw.as_bytes());
        name.truncate(54);
        name = format!("{name}-{:08x}", h & 0xffff_ffff);
    }
    name.trim_end_matches(['-', '.']).to_string()
}

/// The lease name of slot `slot`: `<controller>-shard-<slot>`.
pub fn slot_lease_name(controller: &str, slot: u32) -> String {
    format!("{controller}-shard-{slot}")
}

/// The slot a slot lease name stands for (`None`: not one of `controller`'s slot leases).
pub fn slot_from_lease_name(controller: &str, name: &str) -> Option<u32> {
    name.strip_prefix(controller)?
        .strip_prefix("-shard-")?
        .parse()
        .ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
