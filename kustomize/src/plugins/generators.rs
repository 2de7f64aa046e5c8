//! The `generators:` field: configurations of kustomize's builtin generator plugins, given as
//! files or inline YAML. Their objects join the build like those of `configMapGenerator:` and
//! `secretGenerator:` (which run first), honouring `behavior`.

use serde_json::Value;

use crate::acc::{Acc, Ctx};
use crate::error::{KustomizeError, Result};
use crate::kustomization::Kustomization;
use crate::loader::Loader;
use crate::objects::{load_objects, relative_to};
use crate::yaml::parse_stream;

use super::builtin_kind;
use super::builtins::generate;

fn unsupported(k: &Kustomization, entry: &str, message: &str) -> KustomizeError {
    KustomizeError::Unsupported {
        file: k.file.clone(),
        field: "generators".to_string(),
        entry: entry.to_string(),
        message: message.to_string(),
    }
}

/// The configurations one `generators:` entry names.
fn entry_docs(ldr: &Loader, k: &Kustomization, entry: &str) -> Result<Vec<Value>> {
    if entry.contains('\n') {
        return parse_stream(entry, &format!("{} (generators, inline)", k.file.display()));
    }
    if ldr.is_dir(entry) {
        return Err(unsupported(
            k,
            entry,
            "a directory of generator configurations is not supported; list the files or inline them",
        ));
    }
    load_objects(ldr, entry)
}

/// Runs the builtin generators `generators:` lists, in order.
pub(crate) fn run_generator_entries(
    ldr: &Loader,
    k: &Kustomization,
    acc: &mut Acc,
    ctx: &Ctx,
) -> Result<()> {
    for entry in k.str_entries("generators")? {
        for doc in entry_docs(ldr, k, &entry)? {
            ldr.meter().check_time()?;
            let kind = builtin_kind(k, "generators", &doc)?;
            match kind {
                "ConfigMapGenerator" | "SecretGenerator" => {}
                "HelmChartInflationGenerator" => {
                    return Err(unsupported(
                        k,
                        kind,
                        "Helm chart inflation is not supported",
                    ));
                }
                "IAMPolicyGenerator" => {
                    return Err(unsupported(
                        k,
                        kind,
                        "IAM policy generation is not supported",
                    ));
                }
                _ => {
                    return Err(unsupported(
                        k,
                        kind,
                        "not a generator: the builtin generators are ConfigMapGenerator and SecretGenerator",
                    ));
                }
            }
            let origin = format!(
                "configuredIn: {}\nconfiguredBy:\n  apiVersion: builtin\n  kind: {kind}\n",
                relative_to(&ctx.root, &k.file)
            );
            for g in generate(ldr, k, &doc)? {
                ldr.meter().add_resources(1)?;
                acc.absorb_generated(k, g, origin.clone())?;
            }
        }
    }
    Ok(())
}
