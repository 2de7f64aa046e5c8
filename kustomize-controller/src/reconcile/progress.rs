//! The deferred progress status: Flux writes the `Reconciling` condition ("Fetching manifests
//! for revision ...") as soon as a new revision is seen, then the final status. For a reconcile
//! that ends within [`PROGRESS_DELAY`], nobody can observe the progress status before the final
//! one replaces it, so it costs a request for nothing. The progress is therefore written only
//! when the reconcile is still running after the delay (and again on each later progress step),
//! and never after the final status: [`ProgressWriter::finish`] waits for a write in flight and
//! stops the writer before the final status is patched.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rflux_common::api::kustomization::KustomizationStatus;
use tokio::sync::Notify;

/// How long a reconcile runs before its progress status is written.
pub const PROGRESS_DELAY: Duration = Duration::from_secs(1);

/// Writes a progress status (the Kustomization's status subresource patch).
pub type ProgressSink = Arc<dyn Fn(KustomizationStatus) -> BoxFuture<'static, ()> + Send + Sync>;

/// Whether a reconcile announces its progress at all: not a re-run of the revision a Ready
/// Kustomization has applied (most change nothing, the final status follows at once).
pub fn announces(ready_at_revision: bool) -> bool {
    !ready_at_revision
}

/// Whether the writer writes now: the reconcile is not finished and the latest progress
/// (`version`) is not the one written last.
pub fn write_due(finished: bool, version: u64, written: u64) -> bool {
    !finished && version != written
}

#[derive(Default)]
struct Shared {
    latest: Option<KustomizationStatus>,
    version: u64,
    finished: bool,
}

/// The deferred progress writer of one reconcile; see the module documentation.
#[derive(Default)]
pub struct ProgressWriter {
    shared: Arc<Mutex<Shared>>,
    /// Held while a progress status is written, and by [`ProgressWriter::finish`].
    gate: Arc<tokio::sync::Mutex<()>>,
    notify: Arc<Notify>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for ProgressWriter {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl ProgressWriter {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether progress is being announced (a writer was started).
    pub fn started(&self) -> bool {
        self.task.is_some()
    }

    /// Starts announcing `status`: written by `sink` if the reconcile still runs after `delay`.
    pub fn start(&mut self, status: KustomizationStatus, delay: Duration, sink: ProgressSink) {
        self.update(status);
        if self.task.is_some() {
            return;
        }
        let (shared, gate, notify) = (
            Arc::clone(&self.shared),
            Arc::clone(&self.gate),
            Arc::clone(&self.notify),
        );
        self.task = Some(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut written = 0;
            loop {
                let guard = gate.lock().await;
                let next = {
                    let s = shared.lock().unwrap_or_else(|e| e.into_inner());
                    if s.finished {
                        return;
                    }
                    write_due(s.finished, s.version, written).then(|| (s.version, s.latest.clone()))
                };
                if let Some((version, Some(status))) = next {
                    sink(status).await;
                    written = version;
                }
                drop(guard);
                notify.notified().await;
            }
        }));
    }

    /// The latest progress: written at once if the delay has passed, else when it does.
    pub fn update(&self, status: KustomizationStatus) {
        let mut s = self.lock();
        s.latest = Some(status);
        s.version += 1;
        drop(s);
        self.notify.notify_one();
    }

    /// Stops the writer before the final status: a progress write in flight completes first,
    /// none starts after.
    pub async fn finish(mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let _gate = self.gate.lock().await;
        self.lock().finished = true;
        task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use rflux_common::api::kustomization::ResourceInventory;

    fn status(id: &str) -> KustomizationStatus {
        KustomizationStatus {
            last_attempted_revision: Some(id.to_string()),
            inventory: Some(ResourceInventory::default()),
            ..KustomizationStatus::default()
        }
    }

    fn sink() -> (ProgressSink, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let sink: ProgressSink = Arc::new(move |s: KustomizationStatus| {
            let _ = tx.send(s.last_attempted_revision.unwrap_or_default());
            async {}.boxed()
        });
        (sink, rx)
    }

    #[test]
    fn the_decision() {
        assert!(announces(false));
        assert!(!announces(true));
        assert!(write_due(false, 1, 0));
        assert!(!write_due(false, 1, 1));
        assert!(!write_due(true, 2, 1));
    }

    #[tokio::test]
    async fn a_reconcile_finished_before_the_delay_writes_no_progress() {
        let (sink, mut rx) = sink();
        let mut w = ProgressWriter::default();
        w.start(status("a"), Duration::from_secs(3600), sink);
        assert!(w.started());
        w.update(status("b"));
        w.finish().await;
        assert!(rx.recv().await.is_none(), "no progress write");
    }

    #[tokio::test]
    async fn a_long_reconcile_writes_its_progress_and_each_later_step() {
        let (sink, mut rx) = sink();
        let mut w = ProgressWriter::default();
        w.start(status("fetching"), Duration::from_millis(10), sink);
        assert_eq!(rx.recv().await.as_deref(), Some("fetching"));
        w.update(status("applying"));
        assert_eq!(rx.recv().await.as_deref(), Some("applying"));
        w.finish().await;
        assert!(rx.recv().await.is_none(), "nothing after finish");
    }
}
