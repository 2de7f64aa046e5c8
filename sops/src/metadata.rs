//! The `sops` block of a document (reference §3), decoded as sops decodes it: weakly typed
//! (`"true"` is a bool, `"2"` an int), unknown keys ignored, field names matched exactly
//! and then case-insensitively, a later duplicate key winning.

mod decode;

use decode::{Fields, expected_map, struct_fields, weak_bool, weak_int, weak_list, weak_string};

use crate::cipher::gotime::GoTime;
use crate::error::SopsError;
use crate::tree::Value;

/// Decoded `sops` metadata.
#[derive(Debug, Clone)]
pub struct Metadata {
    /// Key groups, each listing its master keys in the order sops tries them (age, pgp,
    /// kms, gcp_kms, hckms, azure_kv, hc_vault). Top-level key lists make one group.
    pub key_groups: Vec<Vec<MasterKey>>,
    /// Parts needed to rebuild the data key when there are several groups (0 = all found).
    pub shamir_threshold: i64,
    /// `lastmodified`.
    pub last_modified: jiff::Timestamp,
    /// `lastmodified` as sops formats it for the MAC's additional data (seconds, `Z`).
    pub mac_additional_data: String,
    /// The encrypted MAC (`ENC[…]`), possibly empty.
    pub mac: String,
    /// Which values are encrypted.
    pub rule: Rule,
    /// The MAC covers only the encrypted values.
    pub mac_only_encrypted: bool,
    /// The sops version that wrote the file (informational).
    pub version: String,
}

/// The encryption rule of a document (exactly one applies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    UnencryptedSuffix(String),
    EncryptedSuffix(String),
    UnencryptedRegex(String),
    EncryptedRegex(String),
    UnencryptedCommentRegex(String),
    EncryptedCommentRegex(String),
}

/// The kind of a master key, named as in the `sops` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    Age,
    Pgp,
    Kms,
    GcpKms,
    HcKms,
    AzureKv,
    HcVault,
}

impl KeyKind {
    /// The key of the `sops` block listing keys of this kind (`age`, `hc_vault`, …).
    pub fn id(self) -> &'static str {
        match self {
            KeyKind::Age => "age",
            KeyKind::Pgp => "pgp",
            KeyKind::Kms => "kms",
            KeyKind::GcpKms => "gcp_kms",
            KeyKind::HcKms => "hckms",
            KeyKind::AzureKv => "azure_kv",
            KeyKind::HcVault => "hc_vault",
        }
    }

    /// A human name of the key source (`aws kms`, `hc_vault`, …).
    pub fn provider(self) -> &'static str {
        match self {
            KeyKind::Age => "age",
            KeyKind::Pgp => "pgp",
            KeyKind::Kms => "aws kms",
            KeyKind::GcpKms => "gcp kms",
            KeyKind::HcKms => "huaweicloud kms (hckms)",
            KeyKind::AzureKv => "azure key vault (azure_kv)",
            KeyKind::HcVault => "hc_vault (HashiCorp Vault / OpenBao transit)",
        }
    }

    /// Whether rflux can decrypt with keys of this kind.
    pub fn is_supported(self) -> bool {
        matches!(self, KeyKind::Age | KeyKind::Pgp)
    }
}

/// One master key: what it is and the data key (or Shamir part) it wraps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterKey {
    Age {
        recipient: String,
        enc: String,
    },
    Pgp {
        fingerprint: String,
        enc: String,
    },
    Kms {
        arn: String,
        role: String,
        context: Vec<(String, String)>,
        aws_profile: String,
        enc: String,
    },
    GcpKms {
        resource_id: String,
        enc: String,
    },
    HcKms {
        key_id: String,
        enc: String,
    },
    AzureKv {
        vault_url: String,
        name: String,
        version: String,
        enc: String,
    },
    HcVault {
        vault_address: String,
        engine_path: String,
        key_name: String,
        enc: String,
    },
}

impl MasterKey {
    pub fn kind(&self) -> KeyKind {
        match self {
            MasterKey::Age { .. } => KeyKind::Age,
            MasterKey::Pgp { .. } => KeyKind::Pgp,
            MasterKey::Kms { .. } => KeyKind::Kms,
            MasterKey::GcpKms { .. } => KeyKind::GcpKms,
            MasterKey::HcKms { .. } => KeyKind::HcKms,
            MasterKey::AzureKv { .. } => KeyKind::AzureKv,
            MasterKey::HcVault { .. } => KeyKind::HcVault,
        }
    }

    /// The key's name as sops prints it in failures (recipient, fingerprint, ARN, URL, …).
    pub fn name(&self) -> String {
        match self {
            MasterKey::Age { recipient, .. } => recipient.clone(),
            MasterKey::Pgp { fingerprint, .. } => fingerprint.clone(),
            MasterKey::Kms {
                arn,
                role,
                context,
                aws_profile,
                ..
            } => {
                let mut s = arn.clone();
                if !role.is_empty() {
                    s = format!("{s}+{role}");
                }
                let mut ctx: Vec<_> = context.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                ctx.sort();
                let ctx = ctx.join(",");
                if !aws_profile.is_empty() {
                    format!("{s}|{ctx}|{aws_profile}")
                } else if !ctx.is_empty() {
                    format!("{s}|{ctx}")
                } else {
                    s
                }
            }
            MasterKey::GcpKms { resource_id, .. } => resource_id.clone(),
            MasterKey::HcKms { key_id, .. } => key_id.clone(),
            MasterKey::AzureKv {
                vault_url,
                name,
                version,
                ..
            } => format!("{vault_url}/keys/{name}/{version}"),
            MasterKey::HcVault {
                vault_address,
                engine_path,
                key_name,
                ..
            } => format!("{vault_address}/v1/{engine_path}/keys/{key_name}"),
        }
    }

    /// The wrapped data key, as stored.
    pub fn enc(&self) -> &str {
        match self {
            MasterKey::Age { enc, .. }
            | MasterKey::Pgp { enc, .. }
            | MasterKey::Kms { enc, .. }
            | MasterKey::GcpKms { enc, .. }
            | MasterKey::HcKms { enc, .. }
            | MasterKey::AzureKv { enc, .. }
            | MasterKey::HcVault { enc, .. } => enc,
        }
    }
}

impl Metadata {
    /// Decodes the `sops` block (a map). Errors as sops words them: "No keys found in file",
    /// "Cannot use more than one of …", a bad `lastmodified` or `created_at`.
    pub fn from_tree(block: &Value) -> Result<Metadata, SopsError> {
        let Value::Map(entries) = block else {
            return Err(SopsError::NoMetadata);
        };
        if entries.is_empty() {
            return Err(SopsError::NoMetadata);
        }
        let f = Fields::of(entries);
        // Decode every field first (type errors), as mapstructure does.
        let shamir_threshold = weak_int(f.get("shamir_threshold"), "shamir_threshold")?;
        let top = KeyLists::decode(&f, "")?;
        let mut groups = Vec::new();
        for (i, g) in weak_list(f.get("key_groups")).into_iter().enumerate() {
            let ctx = format!("key_groups[{i}]");
            let gf = struct_fields(g, &ctx)?;
            groups.push(KeyLists::decode(&gf, &format!("{ctx}."))?);
        }
        let last_modified = weak_string(f.get("lastmodified"), "lastmodified")?;
        let mac = weak_string(f.get("mac"), "mac")?;
        let rules = [
            "unencrypted_suffix",
            "encrypted_suffix",
            "unencrypted_regex",
            "encrypted_regex",
            "unencrypted_comment_regex",
            "encrypted_comment_regex",
        ]
        .map(|name| weak_string(f.get(name), name));
        let mac_only_encrypted = weak_bool(f.get("mac_only_encrypted"), "mac_only_encrypted")?;
        let version = weak_string(f.get("version"), "version")?;

        let lm = parse_time(&last_modified)?;
        let key_groups = if !top.is_empty() {
            vec![top.into_group()?]
        } else if !groups.is_empty() {
            groups
                .into_iter()
                .map(KeyLists::into_group)
                .collect::<Result<_, _>>()?
        } else {
            return Err(SopsError::Metadata("No keys found in file".into()));
        };

        let mut set = Vec::new();
        for (i, r) in rules.into_iter().enumerate() {
            let r = r?;
            if !r.is_empty() {
                set.push(match i {
                    0 => Rule::UnencryptedSuffix(r),
                    1 => Rule::EncryptedSuffix(r),
                    2 => Rule::UnencryptedRegex(r),
                    3 => Rule::EncryptedRegex(r),
                    4 => Rule::UnencryptedCommentRegex(r),
                    _ => Rule::EncryptedCommentRegex(r),
                });
            }
        }
        if set.len() > 1 {
            return Err(SopsError::Metadata(
                "Cannot use more than one of encrypted_suffix, unencrypted_suffix, encrypted_regex, unencrypted_regex, encrypted_comment_regex, or unencrypted_comment_regex in the same file".into(),
            ));
        }
        let rule = set
            .pop()
            .unwrap_or_else(|| Rule::UnencryptedSuffix("_unencrypted".into()));
        Ok(Metadata {
            key_groups,
            shamir_threshold,
            last_modified: lm
                .timestamp()
                .ok_or_else(|| SopsError::Metadata("lastmodified is out of range".into()))?,
            mac_additional_data: lm.format_seconds(),
            mac,
            rule,
            mac_only_encrypted,
            version,
        })
    }

    /// Every kind of master key in the file, in first-seen order.
    pub fn key_kinds(&self) -> Vec<KeyKind> {
        let mut kinds = Vec::new();
        for k in self.key_groups.iter().flatten() {
            if !kinds.contains(&k.kind()) {
                kinds.push(k.kind());
            }
        }
        kinds
    }
}

/// `time.Parse(time.RFC3339, s)`, with Go's error wording.
fn parse_time(s: &str) -> Result<GoTime, SopsError> {
    GoTime::parse(s).ok_or_else(|| {
        let shown: String = s.chars().take(64).collect();
        SopsError::Metadata(format!(
            "parsing time {shown:?} as \"2006-01-02T15:04:05Z07:00\": not an RFC 3339 time"
        ))
    })
}

/// A master key with its `created_at` text (checked when the group is built).
type Dated = (MasterKey, String);

/// The key lists of the top level or of one key group, before conversion.
#[derive(Default)]
struct KeyLists {
    age: Vec<MasterKey>,
    pgp: Vec<Dated>,
    /// kms, gcp_kms, hckms, azure_kv, hc_vault: sops' conversion order.
    cloud: [Vec<Dated>; 5],
}

impl KeyLists {
    fn decode(f: &Fields<'_>, prefix: &str) -> Result<KeyLists, SopsError> {
        // Each entry of the list `kind`, as the named string fields.
        let rows = |kind: &str, names: &[&str]| -> Result<Vec<Vec<String>>, SopsError> {
            let mut out = Vec::new();
            for (i, item) in weak_list(f.get(kind)).into_iter().enumerate() {
                let ctx = format!("{prefix}{kind}[{i}]");
                let kf = struct_fields(item, &ctx)?;
                let row = names
                    .iter()
                    .map(|n| weak_string(kf.get(n), &format!("{ctx}.{n}")))
                    .collect::<Result<Vec<_>, _>>()?;
                out.push(row);
            }
            Ok(out)
        };
        let mut lists = KeyLists::default();
        for r in rows("age", &["recipient", "enc"])? {
            let [recipient, enc] = take(r);
            lists.age.push(MasterKey::Age { recipient, enc });
        }
        for r in rows("pgp", &["created_at", "enc", "fp"])? {
            let [created_at, enc, fingerprint] = take(r);
            lists
                .pgp
                .push((MasterKey::Pgp { fingerprint, enc }, created_at));
        }
        for (i, item) in weak_list(f.get("kms")).into_iter().enumerate() {
            let ctx = format!("{prefix}kms[{i}]");
            let kf = struct_fields(item, &ctx)?;
            let field = |n: &str| weak_string(kf.get(n), &format!("{ctx}.{n}"));
            let key = MasterKey::Kms {
                arn: field("arn")?,
                role: field("role")?,
                context: kms_context(&kf, &ctx)?,
                aws_profile: field("aws_profile")?,
                enc: field("enc")?,
            };
            lists.cloud[0].push((key, field("created_at")?));
        }
        for r in rows("gcp_kms", &["resource_id", "created_at", "enc"])? {
            let [resource_id, created_at, enc] = take(r);
            lists.cloud[1].push((MasterKey::GcpKms { resource_id, enc }, created_at));
        }
        for r in rows("hckms", &["key_id", "created_at", "enc"])? {
            let [key_id, created_at, enc] = take(r);
            lists.cloud[2].push((MasterKey::HcKms { key_id, enc }, created_at));
        }
        let azure = ["vault_url", "name", "version", "created_at", "enc"];
        for r in rows("azure_kv", &azure)? {
            let [vault_url, name, version, created_at, enc] = take(r);
            let key = MasterKey::AzureKv {
                vault_url,
                name,
                version,
                enc,
            };
            lists.cloud[3].push((key, created_at));
        }
        let vault = [
            "vault_address",
            "engine_path",
            "key_name",
            "created_at",
            "enc",
        ];
        for r in rows("hc_vault", &vault)? {
            let [vault_address, engine_path, key_name, created_at, enc] = take(r);
            let key = MasterKey::HcVault {
                vault_address,
                engine_path,
                key_name,
                enc,
            };
            lists.cloud[4].push((key, created_at));
        }
        Ok(lists)
    }

    fn is_empty(&self) -> bool {
        self.age.is_empty() && self.pgp.is_empty() && self.cloud.iter().all(Vec::is_empty)
    }

    /// The master keys in sops' decryption order (age, pgp, then the cloud kinds), after
    /// checking every `created_at` in sops' conversion order (cloud kinds, then pgp).
    fn into_group(self) -> Result<Vec<MasterKey>, SopsError> {
        for (key, created_at) in self.cloud.iter().flatten().chain(&self.pgp) {
            parse_time(created_at)?;
            if let MasterKey::HcKms { key_id, .. } = key {
                check_hckms_id(key_id)?;
            }
        }
        let mut group = self.age;
        group.extend(self.pgp.into_iter().map(|(k, _)| k));
        group.extend(self.cloud.into_iter().flatten().map(|(k, _)| k));
        Ok(group)
    }
}

/// A row's fields by position (missing ones empty).
fn take<const N: usize>(row: Vec<String>) -> [String; N] {
    let mut it = row.into_iter();
    std::array::from_fn(|_| it.next().unwrap_or_default())
}

/// The `context` map of a kms key (string values).
fn kms_context(kf: &Fields<'_>, ctx: &str) -> Result<Vec<(String, String)>, SopsError> {
    let ctx = format!("{ctx}.context");
    let mut context = Vec::new();
    match kf.get("context") {
        None | Some(Value::Null) => {}
        Some(Value::Map(entries)) => {
            for (k, v) in Fields::of(entries).entries {
                context.push((k.to_string(), weak_string(Some(v), &ctx)?));
            }
        }
        Some(other) => return Err(expected_map(&ctx, other)),
    }
    Ok(context)
}

/// HuaweiCloud key IDs are `region:key-uuid` (sops refuses anything else on load).
fn check_hckms_id(id: &str) -> Result<(), SopsError> {
    match id.trim().split_once(':') {
        Some((region, uuid)) if !region.trim().is_empty() && !uuid.trim().is_empty() => Ok(()),
        _ => Err(SopsError::Metadata(
            "invalid key ID format: expected 'region:key-uuid'".into(),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::tree::Entry;

    fn s(v: &str) -> Value {
        Value::Str(v.into())
    }

    fn map(items: Vec<(&str, Value)>) -> Value {
        Value::Map(
            items
                .into_iter()
                .map(|(k, v)| Entry::Pair(k.into(), v))
                .collect(),
        )
    }

    fn age_block(extra: Vec<(&str, Value)>) -> Value {
        let mut items = vec![
            (
                "age",
                Value::List(vec![map(vec![("recipient", s("age1x")), ("enc", s("E"))])]),
            ),
            ("lastmodified", s("2024-05-06T07:08:09.123Z")),
            ("mac", s("ENC[...]")),
            ("version", s("3.13.3")),
        ];
        items.extend(extra);
        map(items)
    }

    #[test]
    fn decodes_a_plain_age_block() {
        let m = Metadata::from_tree(&age_block(vec![])).unwrap();
        assert_eq!(m.key_groups.len(), 1);
        assert_eq!(m.key_groups[0][0].name(), "age1x");
        assert_eq!(m.rule, Rule::UnencryptedSuffix("_unencrypted".into()));
        assert_eq!(m.mac_additional_data, "2024-05-06T07:08:09Z");
        assert!(!m.mac_only_encrypted);
    }

    #[test]
    fn weak_typing_and_case_insensitive_names() {
        let m = Metadata::from_tree(&age_block(vec![
            ("Mac_Only_Encrypted", s("true")),
            ("encrypted_regex", s("^data$")),
            ("shamir_threshold", s("0x2")),
            ("unknown_key", map(vec![])),
        ]))
        .unwrap();
        assert!(m.mac_only_encrypted);
        assert_eq!(m.shamir_threshold, 2);
        assert_eq!(m.rule, Rule::EncryptedRegex("^data$".into()));
    }

    #[test]
    fn refusals() {
        let two = Metadata::from_tree(&age_block(vec![
            ("encrypted_regex", s("a")),
            ("unencrypted_suffix", s("b")),
        ]))
        .unwrap_err();
        assert!(two.to_string().starts_with("Cannot use more than one of"));
        let none = Metadata::from_tree(&map(vec![
            ("lastmodified", s("2024-05-06T07:08:09Z")),
            ("mac", s("")),
        ]))
        .unwrap_err();
        assert_eq!(none.to_string(), "No keys found in file");
        let bad_time = Metadata::from_tree(&map(vec![
            (
                "age",
                Value::List(vec![map(vec![("recipient", s("a")), ("enc", s("E"))])]),
            ),
            ("mac", s("")),
        ]))
        .unwrap_err();
        assert!(bad_time.to_string().contains("parsing time"), "{bad_time}");
        assert!(matches!(
            Metadata::from_tree(&map(vec![])),
            Err(SopsError::NoMetadata)
        ));
        let typed = Metadata::from_tree(&age_block(vec![("encrypted_regex", map(vec![]))]));
        assert!(typed.is_err());
    }

    #[test]
    fn key_groups_and_cloud_kinds() {
        let group = |enc: &str| {
            map(vec![
                (
                    "hc_vault",
                    Value::List(vec![map(vec![
                        ("vault_address", s("https://vault:8200")),
                        ("engine_path", s("sops")),
                        ("key_name", s("k")),
                        ("created_at", s("2024-01-01T00:00:00Z")),
                        ("enc", s("vault:v1:x")),
                    ])]),
                ),
                (
                    "age",
                    Value::List(vec![map(vec![("recipient", s("age1y")), ("enc", s(enc))])]),
                ),
            ])
        };
        let m = Metadata::from_tree(&map(vec![
            ("key_groups", Value::List(vec![group("A"), group("B")])),
            ("shamir_threshold", Value::Int(2)),
            ("lastmodified", s("2024-01-01T00:00:00Z")),
            ("mac", s("")),
        ]))
        .unwrap();
        assert_eq!(m.key_groups.len(), 2);
        // age first, then the others.
        assert_eq!(m.key_groups[1][0].enc(), "B");
        assert_eq!(
            m.key_groups[0][1].name(),
            "https://vault:8200/v1/sops/keys/k"
        );
        assert_eq!(m.key_kinds(), vec![KeyKind::Age, KeyKind::HcVault]);
    }
}
