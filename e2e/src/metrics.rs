//! Process and apiserver measurements shared by the e2e tests and the fleet benchmark:
//! `apiserver_request_total` from the apiserver's `/metrics` (scrape, parse, subtract,
//! summarise) and CPU/RSS figures from `/proc`.

use std::collections::BTreeMap;

/// Scrapes the apiserver's `apiserver_request_total` with `client` (admin credentials).
pub async fn scrape_request_total(client: &kube::Client) -> anyhow::Result<Counts> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    Ok(parse_request_total(&text))
}

/// Request counts keyed by `VERB group/resource[/subresource][ dry-run]` (codes summed).
pub type Counts = BTreeMap<String, f64>;

/// Parses the `apiserver_request_total` series of a Prometheus text exposition.
pub fn parse_request_total(text: &str) -> Counts {
    let mut out = Counts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(labels);
        let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
        let group = get("group");
        let resource = get("resource");
        let sub = get("subresource");
        let mut key = format!("{} ", get("verb"));
        if !group.is_empty() {
            key.push_str(group);
            key.push('/');
        }
        key.push_str(if resource.is_empty() { "-" } else { resource });
        if !sub.is_empty() {
            key.push('/');
            key.push_str(sub);
        }
        if !get("dry_run").is_empty() {
            key.push_str(" (dry-run)");
        }
        *out.entry(key).or_default() += value;
    }
    out
}

/// Prometheus label set `a="x",b="y"` (with `\"` and `\\` escapes) to a map.
fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        let name: String = chars
            .by_ref()
            .take_while(|c| *c != '=')
            .collect::<String>()
            .trim_start_matches(',')
            .trim()
            .to_string();
        if name.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(name, value);
    }
    out
}

/// `after - before`, dropping keys that did not change.
pub fn diff(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0.0);
            (d.abs() > 0.0).then(|| (k.clone(), d))
        })
        .collect()
}

/// `a - b` per key (keys of both), dropping zeros.
pub fn subtract(a: &Counts, b: &Counts) -> Counts {
    let mut out = a.clone();
    for (k, v) in b {
        *out.entry(k.clone()).or_default() -= v;
    }
    out.retain(|_, v| v.abs() > 0.0);
    out
}

/// Sum of all counts.
pub fn total(c: &Counts) -> f64 {
    c.values().sum()
}

/// Utime + stime in clock ticks from the text of `/proc/<pid>/stat`.
pub fn cpu_ticks_from_stat(stat: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A `Vm*:` value in KiB from the text of `/proc/<pid>/status`.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="PATCH",version="v1"} 5
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="PATCH",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="All",group="",resource="configmaps",scope="resource",subresource="",verb="PATCH",version="v1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kustomize.toolkit.fluxcd.io",resource="kustomizations",scope="resource",subresource="status",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 1
apiserver_request_duration_seconds_bucket{le="1"} 4
"#;

    #[test]
    fn parses_and_groups_by_verb_resource_and_dry_run() {
        let c = parse_request_total(SAMPLE);
        assert_eq!(c["PATCH configmaps"], 7.0);
        assert_eq!(c["PATCH configmaps (dry-run)"], 100.0);
        assert_eq!(
            c["PATCH kustomize.toolkit.fluxcd.io/kustomizations/status"],
            3.0
        );
        assert_eq!(c["GET -//metrics"], 1.0);
        assert_eq!(total(&c), 111.0);
    }

    #[test]
    fn diff_and_subtract() {
        let before = parse_request_total(SAMPLE);
        let after = parse_request_total(&SAMPLE.replace("} 5\n", "} 9\n"));
        let d = diff(&before, &after);
        assert_eq!(d.len(), 1);
        assert_eq!(d["PATCH configmaps"], 4.0);
        let base: Counts = [("PATCH configmaps".to_string(), 1.0)].into();
        assert_eq!(total(&subtract(&d, &base)), 3.0);
        assert!(subtract(&d, &d).is_empty());
    }

    #[test]
    fn proc_parsing() {
        let stat = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 8 0";
        assert_eq!(cpu_ticks_from_stat(stat), Some(325));
        assert_eq!(cpu_ticks_from_stat("garbage"), None);
        let status = "Name:\tx\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\n";
        assert_eq!(status_kib(status, "VmHWM"), Some(51200));
        assert_eq!(status_kib(status, "VmRSS"), Some(40960));
        assert_eq!(status_kib(status, "VmSwap"), None);
    }
}
