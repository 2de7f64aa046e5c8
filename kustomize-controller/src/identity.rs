//! How the kustomize-controller marks what it applies, as Flux's kustomize-controller does:
//! field manager `kustomize-controller`, owner labels and annotations under
//! `kustomize.toolkit.fluxcd.io`.

use kube::ResourceExt;
use rflux_common::api::kustomization::Kustomization;

use crate::ssa::Owner;

/// The server-side apply field manager.
pub const FIELD_MANAGER: &str = "kustomize-controller";
/// The API group of the owner labels and annotations.
pub const GROUP: &str = "kustomize.toolkit.fluxcd.io";
/// Owner label holding the Kustomization name.
pub const NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
/// Owner label holding the Kustomization namespace.
pub const NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";

/// The owner of the objects a Kustomization applies.
pub fn owner_of(ks: &Kustomization) -> Owner {
    owner(&ks.name_any(), &ks.namespace().unwrap_or_default())
}

/// The owner for a Kustomization `namespace/name`.
pub fn owner(name: &str, namespace: &str) -> Owner {
    Owner {
        manager: FIELD_MANAGER.to_string(),
        group: GROUP.to_string(),
        name: name.to_string(),
        namespace: namespace.to_string(),
        options_group: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_under_the_group() {
        let o = owner("app", "ns");
        assert_eq!(o.name_label(), NAME_LABEL);
        assert_eq!(o.namespace_label(), NAMESPACE_LABEL);
        assert_eq!(o.manager, FIELD_MANAGER);
    }
}
