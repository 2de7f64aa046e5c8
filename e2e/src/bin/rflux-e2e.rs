//! `rflux-e2e`: start, stop and inspect the e2e control planes and git server.
//!
//! ```text
//! rflux-e2e build                       # build missing/stale binaries
//! rflux-e2e up [--name N] [--no-git]    # start (or reuse) control plane N (+ git server)
//! rflux-e2e down [--name N]             # stop N; without --name: everything, state dir removed
//! rflux-e2e status [--name N]           # health, pids, ports, RSS; exit 1 if anything is unhealthy
//! rflux-e2e env [--name N]              # `export KUBECONFIG=...` lines for eval
//! ```

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rflux_e2e::{
    ControlPlane, DEFAULT_INSTANCE, GitServer, bin_dir, instance_names, process, state_root,
};

/// `println!` that ignores a closed stdout (e.g. `rflux-e2e status | head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

#[derive(Parser)]
#[command(
    name = "rflux-e2e",
    about = "Local Kubernetes control plane and git server for e2e tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the control-plane and git-server binaries when missing or stale.
    Build,
    /// Start a control plane (reusing a healthy one) and the git server.
    Up {
        /// Instance name; a second instance (e.g. `remote`) is fully independent.
        #[arg(long, default_value = DEFAULT_INSTANCE)]
        name: String,
        /// Do not start the git server.
        #[arg(long)]
        no_git: bool,
    },
    /// Stop one instance, or (without --name) every instance and the git server.
    Down {
        #[arg(long)]
        name: Option<String>,
    },
    /// Show what runs; exits 1 when something recorded is not healthy.
    Status {
        #[arg(long)]
        name: Option<String>,
    },
    /// Print shell `export` lines for an instance and the git server.
    Env {
        #[arg(long, default_value = DEFAULT_INSTANCE)]
        name: String,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rflux-e2e: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Cmd::Build => {
            let started = Instant::now();
            tokio::task::spawn_blocking(rflux_e2e::ensure_binaries).await??;
            eprintln!(
                "binaries ready in {} ({:.1}s)",
                bin_dir().display(),
                started.elapsed().as_secs_f64()
            );
        }
        Cmd::Up { name, no_git } => {
            let started = Instant::now();
            let cp = ControlPlane::ensure(&name).await?;
            let git = if no_git {
                None
            } else {
                Some(tokio::task::spawn_blocking(GitServer::ensure).await??)
            };
            eprintln!(
                "rflux-e2e: {name:?} ready in {:.1}s; control plane RSS {} MiB{}",
                started.elapsed().as_secs_f64(),
                cp.rss_kib() / 1024,
                git.as_ref()
                    .map(|g| format!(", git server RSS {} MiB", g.rss_kib() / 1024))
                    .unwrap_or_default()
            );
            print_env(&cp, git.as_ref());
        }
        Cmd::Down { name: Some(name) } => {
            if !ControlPlane::stop(&name)? {
                eprintln!("rflux-e2e: no instance {name:?}");
            }
        }
        Cmd::Down { name: None } => {
            for name in instance_names() {
                ControlPlane::stop(&name)?;
                eprintln!("rflux-e2e: stopped {name:?}");
            }
            if GitServer::stop()? {
                eprintln!("rflux-e2e: stopped the git server");
            }
            let root = state_root();
            if root.exists() {
                std::fs::remove_dir_all(&root)
                    .with_context(|| format!("removing {}", root.display()))?;
            }
        }
        Cmd::Status { name } => return status(name).await,
        Cmd::Env { name } => {
            let cp = ControlPlane::load(&name)?
                .with_context(|| format!("instance {name:?} is not running"))?;
            print_env(&cp, GitServer::load()?.as_ref());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_env(cp: &ControlPlane, git: Option<&GitServer>) {
    say!("export KUBECONFIG={}", cp.kubeconfig_path().display());
    say!("export RFLUX_E2E_STATE={}", state_root().display());
    say!("export RFLUX_E2E_BIN={}", bin_dir().display());
    if let Some(g) = git {
        let s = g.state();
        say!("export RFLUX_E2E_GIT_HTTP=http://127.0.0.1:{}", s.http_port);
        say!(
            "export RFLUX_E2E_GIT_HTTPS=https://127.0.0.1:{}",
            s.https_port
        );
        say!(
            "export RFLUX_E2E_GIT_MTLS=https://127.0.0.1:{}",
            s.mtls_port
        );
        say!(
            "export RFLUX_E2E_GIT_SSH=ssh://{}@127.0.0.1:{}{}",
            s.ssh_user,
            s.ssh_port,
            s.repos_dir.display()
        );
        say!("export RFLUX_E2E_GIT_CA={}", s.ca_cert.display());
    }
}

async fn status(only: Option<String>) -> anyhow::Result<ExitCode> {
    let names = match only {
        Some(n) => vec![n],
        None => instance_names(),
    };
    let mut all_ok = true;
    let mut any = false;
    for name in names {
        let Some(cp) = ControlPlane::load(&name)? else {
            say!("{name}: not running");
            all_ok = false;
            continue;
        };
        any = true;
        let healthy = cp.is_healthy().await;
        all_ok &= healthy;
        say!(
            "{name}: {} {} kubeconfig={} rss={}MiB",
            if healthy { "healthy" } else { "UNHEALTHY" },
            cp.server_url(),
            cp.kubeconfig_path().display(),
            cp.rss_kib() / 1024
        );
        for p in &cp.state().processes {
            print_process(p);
        }
    }
    if let Some(g) = GitServer::load()? {
        any = true;
        let healthy = g.is_healthy();
        all_ok &= healthy;
        let s = g.state();
        say!(
            "git: {} http={} https={} mtls={} ssh={} rss={}MiB",
            if healthy { "healthy" } else { "UNHEALTHY" },
            s.http_port,
            s.https_port,
            s.mtls_port,
            s.ssh_port,
            g.rss_kib() / 1024
        );
        for p in &s.processes {
            print_process(p);
        }
    }
    Ok(if any && all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_process(p: &process::ProcessInfo) {
    let alive = process::is_alive(p);
    say!(
        "  {:<24} pid={:<7} {} rss={}MiB log={}",
        p.name,
        p.pid,
        if alive { "running" } else { "DEAD" },
        process::rss_kib(p.pid).unwrap_or(0) / 1024,
        p.log.display()
    );
}
