//! Graceful shutdown: SIGTERM / SIGINT cancel a [`CancellationToken`].

use tokio_util::sync::CancellationToken;

/// Waits for SIGTERM or SIGINT (Ctrl-C). Returns the signal name.
pub async fn wait_for_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    r = tokio::signal::ctrl_c() => if r.is_ok() { "SIGINT" } else { "SIGINT (handler error)" },
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

/// Returns a token cancelled on the first SIGTERM/SIGINT. Like controller-runtime, a second
/// signal terminates the process at once with exit code 1.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let sig = wait_for_signal().await;
        tracing::info!(signal = sig, "received signal, shutting down gracefully");
        t.cancel();
        let sig = wait_for_signal().await;
        tracing::error!(signal = sig, "received second signal, exiting immediately");
        std::process::exit(1);
    });
    token
}
