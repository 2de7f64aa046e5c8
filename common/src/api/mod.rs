//! Flux-compatible API types (`source.toolkit.fluxcd.io/v1`, `kustomize.toolkit.fluxcd.io/v1`).
