//! `rflux-fleet`: the fleet benchmark (docs/benchmarks.md), ours and Flux's controllers side
//! by side.
//!
//! ```text
//! rflux-fleet run --implementation ours|flux|floor --bin-dir DIR --crds FILE_OR_DIR... --n 100 \
//!     [--variant a|b] [--profile equal] [--concurrent 4] [--sc-args "..."] [--kc-args "..."] \
//!     [--phases api,fleet,idle,change,drift] --out results.jsonl
//! rflux-fleet table results.jsonl            # markdown: figure | ours | Flux | ratio
//! ```
//!
//! A run starts a fresh named control plane (`fleet-<implementation>`), pushes the workload to
//! the e2e git server, starts the two controllers as processes, measures the phases, stops the
//! controllers and the control plane, and appends one JSON line to `--out`.
//! `scripts/bench-fleet.sh` runs ours and Flux one after the other and prints the table.

mod cli;
mod cluster;
mod fixtures;
mod floor;
mod kubectl;
mod phases;
mod procs;
mod report;
mod stats;
mod util;
mod watch;

use anyhow::{Context, bail};
use clap::Parser;
use rflux_e2e::ControlPlane;

use cli::{Cli, Cmd, cp_name};
use procs::{kill_registered, shutdown_signal};
use util::log;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run_cli(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rflux-fleet: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run_cli(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Table {
            files,
            load_tolerance,
        } => {
            let mut all = Vec::new();
            for f in files {
                let text = std::fs::read_to_string(&f)
                    .with_context(|| format!("reading {}", f.display()))?;
                all.extend(
                    report::parse_results(&text)
                        .with_context(|| format!("parsing {}", f.display()))?,
                );
            }
            println!("{}", report::table(&all, load_tolerance));
            Ok(())
        }
        Cmd::Run(args) => {
            let name = cp_name(&args);
            let result = tokio::select! {
                r = phases::run(&args) => r?,
                _ = shutdown_signal() => {
                    log("interrupted: stopping the controllers and the control plane");
                    kill_registered();
                    if !args.keep {
                        tokio::task::spawn_blocking(move || ControlPlane::stop(&name)).await??;
                    }
                    bail!("interrupted");
                }
            };
            let line = serde_json::to_string(&result)?;
            if let Some(parent) = args.out.parent() {
                std::fs::create_dir_all(parent)?;
            }
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&args.out)
                .with_context(|| format!("opening {}", args.out.display()))?;
            writeln!(f, "{line}")?;
            println!(
                "{}",
                report::table(std::slice::from_ref(&result), f64::INFINITY)
            );
            Ok(())
        }
    }
}
