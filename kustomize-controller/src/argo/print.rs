//! `kustomize-controller build --argo-order`: the built objects in plan order, each step
//! introduced by a YAML comment line.

use serde_json::Value;

use super::error::ArgoError;
use super::plan::{LeftOutReason, plan};
use super::task::Source;

/// The ordered stream and what the user should know about it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderedStream {
    /// A valid multi-document YAML stream: each step starts with `# <Phase> wave <n>`, and
    /// every document after the first follows a `---` line.
    pub text: String,
    /// One line per object that is not applied (Skip, hooks with no sync phase).
    pub left_out: Vec<String>,
    /// One line per annotation value Argo ignores.
    pub notes: Vec<String>,
}

/// Orders `objects` as a sync would apply them (no naming of `generateName` hooks: they are
/// printed as built). A hook with several phases is printed once per phase. `print` turns a
/// list of objects into a YAML stream with `---` lines between documents and none before the
/// first (like `rflux_kustomize::to_yaml_stream`).
pub fn ordered_stream(
    objects: &[Value],
    print: impl Fn(&[Value]) -> String,
) -> Result<OrderedStream, ArgoError> {
    let plan = plan(objects)?;
    let mut out = OrderedStream::default();
    for step in &plan.steps {
        let docs: Vec<Value> = step
            .apply
            .iter()
            .filter_map(|t| match t.source {
                Source::Desired(at) => objects.get(at).cloned(),
                _ => None,
            })
            .collect();
        if docs.is_empty() {
            continue;
        }
        if !out.text.is_empty() {
            out.text.push_str("---\n");
        }
        out.text.push_str(&format!("# {step}\n"));
        let text = print(&docs);
        out.text.push_str(&text);
        if !text.ends_with('\n') {
            out.text.push('\n');
        }
    }
    out.left_out = plan
        .left_out
        .iter()
        .map(|l| {
            let why = match l.reason {
                LeftOutReason::Skip => "hook Skip",
                LeftOutReason::NoSyncPhase => "a hook with no sync phase",
                LeftOutReason::NotPrunable => "a hook",
            };
            format!("{}: not applied ({why})", l.object)
        })
        .collect();
    out.notes = plan
        .notes
        .iter()
        .map(|n| format!("{}: {}", n.object, n.message))
        .collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str, wave: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "annotations": {"argocd.argoproj.io/sync-wave": wave}}})
    }

    fn job(name: &str, hook: &str) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": name, "annotations": {"argocd.argoproj.io/hook": hook}}})
    }

    #[test]
    fn steps_are_labelled_and_the_stream_parses_back_in_order() {
        let objects = vec![
            cm("late", "2"),
            job("migrate", "PreSync"),
            cm("early", "-1"),
            cm("zero", "0"),
            job("skipped", "Skip"),
            job("smoke", "PostSync"),
        ];
        let out = ordered_stream(&objects, rflux_kustomize::to_yaml_stream).expect("plan");
        let labels: Vec<&str> = out.text.lines().filter(|l| l.starts_with('#')).collect();
        assert_eq!(
            labels,
            vec![
                "# PreSync wave 0",
                "# Sync wave -1",
                "# Sync wave 0",
                "# Sync wave 2",
                "# PostSync wave 0"
            ]
        );
        let back = rflux_kustomize::yaml::parse_stream(&out.text, "out").expect("valid YAML");
        let names: Vec<&str> = back
            .iter()
            .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
            .collect();
        assert_eq!(names, vec!["migrate", "early", "zero", "late", "smoke"]);
        // The fast reader, which cuts the stream at `---` lines, agrees.
        let tracked = rflux_kustomize::yaml::parse_stream_tracked(&out.text, "out").expect("valid");
        assert_eq!(tracked.len(), 5);
        assert_eq!(out.left_out, vec!["Job/skipped: not applied (hook Skip)"]);
    }

    #[test]
    fn several_objects_in_a_step_share_one_label() {
        let out = ordered_stream(
            &[cm("b", "1"), cm("a", "1")],
            rflux_kustomize::to_yaml_stream,
        )
        .expect("plan");
        assert!(out.text.starts_with("# Sync wave 1\n"), "{}", out.text);
        assert_eq!(out.text.matches("---\n").count(), 1);
        let back = rflux_kustomize::yaml::parse_stream(&out.text, "out").expect("valid YAML");
        assert_eq!(back[0]["metadata"]["name"], "a");
    }

    #[test]
    fn no_objects_give_an_empty_stream() {
        let out = ordered_stream(&[], rflux_kustomize::to_yaml_stream).expect("plan");
        assert_eq!(out, OrderedStream::default());
    }

    #[test]
    fn refused_options_fail_the_ordering() {
        let mut o = cm("c", "0");
        o["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] = json!("Prune=confirm");
        assert!(ordered_stream(&[o], rflux_kustomize::to_yaml_stream).is_err());
    }
}
