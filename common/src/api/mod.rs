//! Flux-compatible API types (`source.toolkit.fluxcd.io/v1`, `kustomize.toolkit.fluxcd.io/v1`,
//! and Flux Operator's `fluxcd.controlplane.io/v1` ResourceSet and ResourceSetInputProvider)
//! and the generation of their CustomResourceDefinitions.

pub mod crd;
pub mod gitrepository;
pub mod kustomization;
pub mod meta;
pub mod ocirepository;
pub mod resourceset;
pub mod resourcesetinputprovider;

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
pub use resourceset::validate::SpecError as ResourceSetSpecError;
pub use resourceset::{
    InputProviderReference, InputSet, InputStrategy, InputStrategySpec, ResourceSet,
    ResourceSetDependency, ResourceSetSpec, ResourceSetStatus, ResourceSetStep, ResourceTemplate,
};
pub use resourcesetinputprovider::{
    InputProviderFilter, InputProviderSkip, InputProviderType, InputSelector, NextSchedule,
    ResourceSetInputProvider, ResourceSetInputProviderSpec, ResourceSetInputProviderStatus,
    Schedule,
};
