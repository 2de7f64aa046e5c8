//! The postBuild evaluator's files (see the parent module).

#[path = "../../../kustomize-controller/src/substitute/budget.rs"]
pub mod budget;
#[path = "../../../kustomize-controller/src/substitute/envsubst.rs"]
pub mod envsubst;
#[path = "../../../kustomize-controller/src/substitute/error.rs"]
pub mod error;
#[path = "../../../kustomize-controller/src/substitute/glob.rs"]
pub mod glob;
#[path = "../../../kustomize-controller/src/substitute/parse.rs"]
pub mod parse;
