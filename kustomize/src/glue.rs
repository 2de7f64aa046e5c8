//! Calls into the patch module for `replacements:` and `vars:` over the build's items.

use serde_json::Value;

use crate::fieldspec::FieldSpec;
use crate::item::Item;
use crate::patch::{PatchError, replacements as repl, vars as pvars};
use crate::resource::{ResId, Resource};

/// Moves the resources out of the items, runs `f`, and puts them back.
fn with_resources<T>(
    items: &mut [Item],
    f: impl FnOnce(&mut [Resource], &[Vec<ResId>]) -> Result<T, PatchError>,
) -> Result<T, PatchError> {
    let ids: Vec<Vec<ResId>> = items.iter().map(|i| i.prev_ids.clone()).collect();
    let mut resources: Vec<Resource> = items
        .iter_mut()
        .map(|i| std::mem::replace(&mut i.res, Resource::new(Value::Null)))
        .collect();
    let out = f(&mut resources, &ids);
    for (item, r) in items.iter_mut().zip(resources) {
        item.res = r;
    }
    out
}

/// Runs the `replacements:` entries over the items.
pub fn replacements(items: &mut [Item], list: &[Value]) -> Result<(), PatchError> {
    with_resources(items, |res, ids| repl::apply_with_ids(res, ids, list))
}

/// Resolves `vars:` and substitutes `$(VAR)` references at the var-reference fields.
pub fn vars(items: &mut [Item], vars: &[Value], specs: &[FieldSpec]) -> Result<(), PatchError> {
    with_resources(items, |res, ids| {
        let values = pvars::resolve_with_ids(res, ids, vars)?;
        pvars::substitute(res, &values, specs)?;
        Ok(())
    })
}
