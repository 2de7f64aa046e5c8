//! Controller plumbing shared by both binaries.
