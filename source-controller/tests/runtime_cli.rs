//! The controller binary: fails cleanly without a cluster, serves probes against a (fake) API
//! server, and exits 0 on SIGTERM.

use rflux_common::testing::CliCheck;

const CHECK: CliCheck = CliCheck {
    bin: env!("CARGO_BIN_EXE_source-controller"),
    help_flags: &["--storage-path", "--storage-adv-addr"],
    run_args: &["--storage-path={dir}"],
    expected_metric: "controller_runtime_max_concurrent_reconciles{controller=\"gitrepository\"} 2",
};

#[test]
fn fails_cleanly_without_kubeconfig() {
    CHECK.fails_cleanly_without_kubeconfig();
}

#[test]
fn rejects_unknown_flags() {
    CHECK.rejects_unknown_flags();
}

#[test]
fn help_lists_flux_flags() {
    CHECK.help_lists_flux_flags();
}

#[test]
fn serves_probes_and_exits_zero_on_sigterm() {
    CHECK.serves_probes_and_exits_zero_on_sigterm();
}
