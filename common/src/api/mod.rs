//! Flux-compatible API types (`source.toolkit.fluxcd.io/v1`, `kustomize.toolkit.fluxcd.io/v1`)
//! and the generation of their CustomResourceDefinitions.

pub mod crd;
pub mod gitrepository;
pub mod kustomization;
pub mod meta;
pub mod ocirepository;

pub use gitrepository::{
    GitProvider, GitRepository, GitRepositoryInclude, GitRepositoryRef, GitRepositorySpec,
    GitRepositoryStatus, GitRepositoryVerification, GitVerificationMode,
};
pub use kustomization::{
    Kustomization, KustomizationSpec, KustomizationStatus, ObjMetadata, ResourceInventory,
    ResourceRef, Snapshot,
};
pub use meta::{
    Artifact, CrossNamespaceSourceReference, DependencyReference, KubeConfigReference,
    LocalObjectReference, NamespacedObjectKindReference, NamespacedObjectReference,
    SecretKeyReference, SourceKind,
};
pub use ocirepository::{
    OciLayerOperation, OciLayerSelector, OciProvider, OciRepository, OciRepositoryRef,
    OciRepositorySpec, OciRepositoryStatus, OciRepositoryVerification, OciVerificationProvider,
};
