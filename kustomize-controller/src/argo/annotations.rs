//! Reading Argo annotations: string access, Argo's comma lists, Go's `strconv.Atoi`, the wave.

use serde_json::Value;

use super::keys::{HELM_HOOK_WEIGHT, SYNC_WAVE};

/// The string value of an annotation. Values that are not strings (the API server refuses
/// them, so Argo never sees one) count as absent.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get("annotations")?.get(key)?.as_str()
}

/// Argo's comma list (`GetAnnotationCSVs`): split on `,`, each item trimmed, empty items
/// dropped, duplicates dropped (the first one kept), order kept.
pub fn csv(value: &str) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for item in value.split(',').map(str::trim) {
        if !item.is_empty() && !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// The items of an annotation's comma list; empty when the annotation is absent.
pub fn annotation_csv<'a>(obj: &'a Value, key: &str) -> Vec<&'a str> {
    annotation(obj, key).map(csv).unwrap_or_default()
}

/// Go's `strconv.Atoi` on a 64-bit platform (§1.1): an optional `+` or `-`, then one or more
/// ASCII digits, nothing else (no spaces, no `_`, no `0x`), within `i64`. `None` otherwise.
pub fn parse_go_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // The text is now exactly what Rust's parser accepts too; it still refuses overflow.
    text.parse::<i64>().ok()
}

/// Where an object's wave comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaveSource {
    /// `argocd.argoproj.io/sync-wave`.
    SyncWave,
    /// `helm.sh/hook-weight` (no valid `sync-wave`).
    HelmWeight,
    /// Neither parses: 0.
    Default,
}

/// An object's wave (§1.1): `sync-wave` when it parses, else `helm.sh/hook-weight` when that
/// parses (on any object, hook or not), else 0.
pub fn wave(obj: &Value) -> i64 {
    wave_with_source(obj).0
}

/// [`wave`] and where it came from.
pub fn wave_with_source(obj: &Value) -> (i64, WaveSource) {
    if let Some(w) = annotation(obj, SYNC_WAVE).and_then(parse_go_int) {
        return (w, WaveSource::SyncWave);
    }
    match annotation(obj, HELM_HOOK_WEIGHT).and_then(parse_go_int) {
        Some(w) => (w, WaveSource::HelmWeight),
        None => (0, WaveSource::Default),
    }
}

/// Messages for wave annotations that are present but do not parse (Argo ignores them).
pub fn wave_notes(obj: &Value) -> Vec<String> {
    let mut notes = Vec::new();
    for key in [SYNC_WAVE, HELM_HOOK_WEIGHT] {
        if let Some(text) = annotation(obj, key)
            && parse_go_int(text).is_none()
        {
            notes.push(format!(
                "{key}: {:?} is not an integer (Go Atoi); ignored as Argo does",
                super::error::quote(text)
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "annotations": annotations}})
    }

    #[test]
    fn go_atoi_accepts_sign_and_digits_only() {
        // §1.1: optional sign, digits only, no whitespace trimming.
        assert_eq!(parse_go_int("1"), Some(1));
        assert_eq!(parse_go_int("-1"), Some(-1));
        assert_eq!(parse_go_int("+1"), Some(1));
        assert_eq!(parse_go_int("007"), Some(7));
        assert_eq!(parse_go_int("-0"), Some(0));
        for bad in [
            " 1", "1 ", "\t1", "1.5", "1e3", "", "+", "-", "+-1", "--1", "1_000", "0x10", "１",
            "one",
        ] {
            assert_eq!(parse_go_int(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn go_atoi_refuses_overflow() {
        assert_eq!(parse_go_int("9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_go_int("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_go_int("9223372036854775808"), None);
        assert_eq!(parse_go_int("-9223372036854775809"), None);
        assert_eq!(parse_go_int("99999999999999999999999999"), None);
    }

    #[test]
    fn wave_defaults_to_zero() {
        assert_eq!(wave(&json!({"kind": "ConfigMap"})), 0);
        assert_eq!(wave_with_source(&with(json!({}))), (0, WaveSource::Default));
    }

    #[test]
    fn sync_wave_wins_over_helm_weight() {
        let obj = with(json!({SYNC_WAVE: "-3", HELM_HOOK_WEIGHT: "7"}));
        assert_eq!(wave_with_source(&obj), (-3, WaveSource::SyncWave));
    }

    #[test]
    fn invalid_sync_wave_falls_back_to_helm_weight_even_on_non_hooks() {
        // §1.1: "If it does not parse, fall back to helm.sh/hook-weight, even on non-hook objects".
        let obj = with(json!({SYNC_WAVE: " 1", HELM_HOOK_WEIGHT: "5"}));
        assert_eq!(wave_with_source(&obj), (5, WaveSource::HelmWeight));
        let obj = with(json!({HELM_HOOK_WEIGHT: "+2"}));
        assert_eq!(wave(&obj), 2);
        // §1.7: "An invalid wave string gives 0 (or the Helm weight)".
        let obj = with(json!({SYNC_WAVE: "1.5", HELM_HOOK_WEIGHT: "x"}));
        assert_eq!(wave_with_source(&obj), (0, WaveSource::Default));
        assert_eq!(wave_notes(&obj).len(), 2);
    }

    #[test]
    fn non_string_annotation_values_count_as_absent() {
        let obj = with(json!({SYNC_WAVE: 4}));
        assert_eq!(annotation(&obj, SYNC_WAVE), None);
        assert_eq!(wave(&obj), 0);
        assert!(wave_notes(&obj).is_empty());
    }

    #[test]
    fn csv_trims_drops_empty_and_duplicates() {
        assert_eq!(
            csv(" PreSync , ,PostSync,PreSync,"),
            vec!["PreSync", "PostSync"]
        );
        assert!(csv("").is_empty());
        assert!(csv(" , ").is_empty());
        // Only the ends are trimmed: inner spaces stay.
        assert_eq!(csv("Prune = false"), vec!["Prune = false"]);
    }
}
