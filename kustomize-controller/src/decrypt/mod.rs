//! SOPS decryption (`spec.decryption`), as Flux's kustomize-controller does it
//! (`../shared/reference/sops.md` §9), on top of the `rflux-sops` crate:
//!
//! 1. [`keys`]: the keys come from the Kustomization's `decryption.secretRef` Secret (or the
//!    `--sops-age-secret` one): `*.agekey` age identities and `*.asc` OpenPGP keys. Cloud and
//!    Vault key sources are refused, naming the provider.
//! 2. [`sources`], before the build: `secretGenerator` files and env files and local patch
//!    files that hold a SOPS document are decrypted **into memory** (a
//!    [`rflux_kustomize::FileOverlay`] the build reads instead of the disk; Flux overwrites
//!    them in its working copy, we write no plaintext anywhere).
//! 3. [`objects`], after the build: objects with a `sops` block, and Secret `data` values that
//!    are SOPS documents, are decrypted in place.
//! 4. [`objects::refuse_encrypted`], before the apply: a v1 Secret that is still encrypted is
//!    never applied.
//!
//! Every failure names the file or object and never the plaintext.

pub mod keys;
pub mod objects;
pub mod sources;

pub use keys::{KeySource, keys_from_secret_data, load_keys};
pub use objects::{DECRYPT_ANNOTATION, decrypt_objects, refuse_encrypted};
pub use sources::decrypt_sources;
