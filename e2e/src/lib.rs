//! E2E fixtures.
