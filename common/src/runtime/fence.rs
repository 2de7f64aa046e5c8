//! The write fence of a leader-elected replica: writes to the API server are allowed only while
//! this replica's lease is certainly still its own, judged on the local monotonic clock from the
//! last successful renewal. A leader that was frozen (SIGSTOP, a long GC pause, a stalled node)
//! and wakes after another replica took the lease sends no write at all, even before its
//! elector has run again: every client of the controller carries [`FenceLayer`], and the
//! check needs no request. Reads, lists and watches pass.
//!
//! Without leader election the fence is open ([`WriteFence::open`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::{Method, Request};
use futures::future::BoxFuture;
use tower::{Layer, Service};

/// Why a write was not sent.
#[derive(Debug, thiserror::Error)]
#[error("write to {path} refused: this replica does not hold the leader lease")]
pub struct WriteFenced {
    /// The request path.
    pub path: String,
}

#[derive(Debug)]
enum State {
    /// No leader election: writes always pass.
    Open,
    /// Writes pass until this instant (none before the first acquisition).
    Until(Option<Instant>),
}

/// Shared between the elector (which extends it) and every client (which checks it).
#[derive(Clone, Debug)]
pub struct WriteFence {
    state: Arc<Mutex<State>>,
}

impl Default for WriteFence {
    fn default() -> Self {
        Self::open()
    }
}

impl WriteFence {
    /// A fence that never closes (no leader election).
    pub fn open() -> Self {
        WriteFence {
            state: Arc::new(Mutex::new(State::Open)),
        }
    }

    /// A closed fence, opened by [`WriteFence::renewed`].
    pub fn closed() -> Self {
        WriteFence {
            state: Arc::new(Mutex::new(State::Until(None))),
        }
    }

    /// The lease was acquired or renewed by a request sent at `sent`: writes may go until
    /// `sent + window` (the renew deadline, shorter than the lease duration another replica
    /// waits before it takes over).
    pub fn renewed(&self, sent: Instant, window: Duration) {
        if let Ok(mut s) = self.state.lock()
            && let State::Until(until) = &mut *s
        {
            let next = sent + window;
            if until.is_none_or(|u| next > u) {
                *until = Some(next);
            }
        }
    }

    /// The lease is lost or released: no write from now on.
    pub fn close(&self) {
        if let Ok(mut s) = self.state.lock()
            && let State::Until(until) = &mut *s
        {
            *until = None;
        }
    }

    /// Whether a write may be sent now.
    pub fn allows_writes(&self) -> bool {
        self.allows_writes_at(Instant::now())
    }

    fn allows_writes_at(&self, now: Instant) -> bool {
        match self.state.lock() {
            Ok(s) => match &*s {
                State::Open => true,
                State::Until(until) => until.is_some_and(|u| now < u),
            },
            Err(_) => false,
        }
    }
}

/// Whether a request changes something (reads, lists and watches do not).
pub fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A client layer that refuses writes while the fence is closed.
#[derive(Clone, Debug)]
pub struct FenceLayer {
    fence: WriteFence,
}

impl FenceLayer {
    /// The layer for `fence`.
    pub fn new(fence: WriteFence) -> Self {
        FenceLayer { fence }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Fenced {
            inner,
            fence: self.fence.clone(),
        }
    }
}

/// Service produced by [`FenceLayer`].
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    fence: WriteFence,
}

impl<S, B> Service<Request<B>> for Fenced<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
    S::Error: From<WriteFenced> + Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if is_write(req.method()) && !self.fence.allows_writes() {
            let err = WriteFenced {
                path: req.uri().path().to_string(),
            };
            return Box::pin(async move { Err(err.into()) });
        }
        let fut: Pin<Box<S::Future>> = Box::pin(self.inner.call(req));
        Box::pin(fut)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_open_fence_never_closes() {
        let f = WriteFence::open();
        assert!(f.allows_writes());
        f.close();
        assert!(f.allows_writes());
    }

    #[test]
    fn a_leader_writes_only_within_the_window_of_its_last_renewal() {
        let f = WriteFence::closed();
        let t0 = Instant::now();
        assert!(!f.allows_writes_at(t0), "no write before the lease is held");
        f.renewed(t0, Duration::from_secs(30));
        assert!(f.allows_writes_at(t0 + Duration::from_secs(29)));
        // Frozen past the window: closed on the clock alone, before any renewal attempt.
        assert!(!f.allows_writes_at(t0 + Duration::from_secs(30)));
        // An older renewal never shortens the window.
        f.renewed(t0 - Duration::from_secs(10), Duration::from_secs(30));
        assert!(f.allows_writes_at(t0 + Duration::from_secs(29)));
        f.close();
        assert!(!f.allows_writes_at(t0 + Duration::from_secs(1)));
    }

    #[test]
    fn only_writes_are_fenced() {
        for m in [Method::GET, Method::HEAD] {
            assert!(!is_write(&m));
        }
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(is_write(&m));
        }
    }

    /// Counts the requests that reach it.
    struct Counting(Arc<std::sync::atomic::AtomicUsize>);

    impl Service<Request<()>> for Counting {
        type Response = ();
        type Error = Box<dyn std::error::Error + Send + Sync>;
        type Future = BoxFuture<'static, Result<(), Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn a_closed_fence_refuses_writes_without_sending_them() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let sent = Arc::new(AtomicUsize::new(0));
        let fence = WriteFence::closed();
        let mut svc = FenceLayer::new(fence.clone()).layer(Counting(sent.clone()));
        let req = |m: Method| {
            Request::builder()
                .method(m)
                .uri("/api/v1/namespaces/a/configmaps")
                .body(())
                .unwrap()
        };
        let err = svc.call(req(Method::PATCH)).await.unwrap_err();
        assert!(
            err.to_string().contains("does not hold the leader lease"),
            "{err}"
        );
        svc.call(req(Method::GET)).await.unwrap();
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        fence.renewed(Instant::now(), Duration::from_secs(30));
        svc.call(req(Method::PATCH)).await.unwrap();
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }
}
