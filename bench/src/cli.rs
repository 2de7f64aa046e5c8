//! The command line: subcommands and the flags of a run.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::fixtures::Variant;

#[derive(Parser)]
#[command(
    name = "rflux-fleet",
    about = "Fleet benchmark: rflux vs Flux controllers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// One run of one implementation on a fresh control plane; appends a JSON line to --out.
    Run(Box<RunArgs>),
    /// Prints the side-by-side tables of the runs in the given results files.
    Table {
        /// JSON-lines files written by `run`.
        files: Vec<PathBuf>,
        /// Refuse a repetition whose runs' 1-minute load average (before or after) differs by
        /// more than this.
        #[arg(long, default_value_t = 1.0)]
        load_tolerance: f64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Implementation {
    Ours,
    Flux,
    /// The apiserver floor (`floor.rs`): no controllers, only the requests any must send.
    Floor,
}

impl Implementation {
    pub fn label(self) -> &'static str {
        match self {
            Implementation::Ours => "ours",
            Implementation::Flux => "flux",
            Implementation::Floor => "floor",
        }
    }

    pub fn binaries(self) -> (&'static str, &'static str) {
        match self {
            Implementation::Ours => ("source-controller", "kustomize-controller"),
            Implementation::Flux | Implementation::Floor => {
                ("flux-source-controller", "flux-kustomize-controller")
            }
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Which controllers to run.
    #[arg(long, value_enum)]
    pub implementation: Implementation,
    /// Directory with the two controller binaries (ours: source-controller and
    /// kustomize-controller; Flux: flux-source-controller and flux-kustomize-controller).
    #[arg(long)]
    pub bin_dir: PathBuf,
    /// CRD files or directories to install (`kubectl apply --server-side -f`).
    #[arg(long, required = true, num_args = 1..)]
    pub crds: Vec<PathBuf>,
    /// Number of Kustomizations.
    #[arg(long, default_value_t = 100)]
    pub n: usize,
    /// a: one GitRepository per Kustomization; b: one shared GitRepository.
    #[arg(long, value_enum, default_value = "a")]
    pub variant: Variant,
    /// Label of the controller settings in the table.
    #[arg(long, default_value = "equal")]
    pub profile: String,
    /// `--concurrent` of both controllers.
    #[arg(long, default_value_t = 4)]
    pub concurrent: u16,
    /// Extra source-controller flags (space-separated).
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub sc_args: String,
    /// Extra kustomize-controller flags (space-separated).
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub kc_args: String,
    /// Phases to run, in this order: api, fleet, idle, change, drift.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "api,fleet,idle,change,drift"
    )]
    pub phases: Vec<String>,
    /// Length of the idle CPU window.
    #[arg(long, default_value_t = 120)]
    pub idle_secs: u64,
    /// Limit of each waiting phase.
    #[arg(long, default_value_t = 1200)]
    pub timeout_secs: u64,
    /// Kustomization interval set for the drift phase.
    #[arg(long, default_value_t = 20)]
    pub drift_interval_secs: u64,
    /// Results file (JSON lines, appended).
    #[arg(long)]
    pub out: PathBuf,
    /// Directory for logs, storage and profiles of the run.
    #[arg(long, default_value = "target/bench/fleet")]
    pub work_dir: PathBuf,
    /// Control plane instance name (default `fleet-<implementation>`).
    #[arg(long)]
    pub cp_name: Option<String>,
    /// Leave the control plane and the controllers running at the end.
    #[arg(long)]
    pub keep: bool,
    /// Record a CPU profile of kustomize-controller during the fleet phase (`perf record`).
    #[arg(long)]
    pub perf: bool,
    /// Repetition number (the table pairs the implementations' runs of one repetition).
    #[arg(long, default_value_t = 0)]
    pub rep: usize,
    /// Session label (the table reports the latest session of each N, variant and settings).
    #[arg(long, default_value = "")]
    pub session: String,
}

pub fn cp_name(args: &RunArgs) -> String {
    args.cp_name
        .clone()
        .unwrap_or_else(|| format!("fleet-{}", args.implementation.label()))
}
