//! A fault-injecting reverse proxy in front of a control plane's apiserver, for the
//! fault-injection e2e suite (issue 14).
//!
//! [`FaultProxy::start`] listens on a plain-HTTP loopback port and forwards every request to
//! the HTTPS apiserver (trusting its CA), passing the client's headers through (its
//! `Authorization` bearer token included) and streaming the responses (watches stay open). Give
//! a controller a kubeconfig whose server is [`FaultProxy::url`]
//! ([`crate::ControlPlane::token_kubeconfig`]`(Some(url))`) and the test decides, while it runs,
//! what each of the controller's requests meets:
//!
//! - a [`Rule`] matches on the method, a regex on the path, whether the request is a watch, and
//!   any predicate on the [`RequestInfo`] (query, body);
//! - it fires for every match, the first/next N (`skip`, `times`), or with a probability drawn
//!   from the proxy's seeded RNG;
//! - its [`Action`]: pass, respond with a status code and a proper `metav1.Status` body (409
//!   Conflict, 422 Invalid, 500, 410 Expired, …), reset the connection, delay, hold the request
//!   until the test releases it ([`FaultProxy::next_held`] tells the test a request is held, so
//!   it can SIGKILL the client at that exact point), answer a watch with a 410 `ERROR` event, or
//!   one of several actions picked by the RNG;
//! - [`FaultProxy::end_watches`] ends every open watch stream now (closed, with a 410 `ERROR`
//!   event, or reset), which forces the clients to relist;
//! - [`FaultProxy::counts`] says how many requests each rule matched and fired on.
//!
//! Rules are tried in order; the first that matches and fires decides, the rest see nothing.
//! Injected error messages contain [`INJECTED`], so a test can tell them from real ones.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use regex::Regex;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot, watch};

/// Text in every error message the proxy makes up.
pub const INJECTED: &str = "injected by the fault proxy";

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// What can go wrong with the proxy itself.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("binding the proxy's listener: {0}")]
    Bind(#[source] std::io::Error),
    #[error("the CA bundle is not valid PEM: {0}")]
    Ca(#[source] reqwest::Error),
    #[error("building the upstream client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("no request was held by rule {rule} within {timeout:?}")]
    NotHeld { rule: RuleId, timeout: Duration },
    #[error("no rule {0}")]
    NoRule(RuleId),
}

/// Identifies a rule added with [`FaultProxy::add`].
pub type RuleId = u64;

/// What a rule looks at: the request as it arrived (its body read in full).
#[derive(Clone, Debug)]
pub struct RequestInfo {
    pub method: Method,
    pub path: String,
    pub query: String,
    /// `watch=true`/`watch=1` in the query, or a legacy `/watch/` path.
    pub watch: bool,
    pub body: Bytes,
}

impl RequestInfo {
    /// Whether the query names `key` (with any value), e.g. `dryRun`.
    pub fn has_query_key(&self, key: &str) -> bool {
        self.query
            .split('&')
            .any(|kv| kv.split('=').next() == Some(key))
    }

    /// The body as text (lossy).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What a firing rule does to the request.
#[derive(Clone, Debug)]
pub enum Action {
    /// Forward it (counts it, and shadows later rules).
    Pass,
    /// Answer with this status code and a `metav1.Status` body; nothing is forwarded.
    Respond(u16),
    /// Close the connection without an answer (TCP RST); nothing is forwarded.
    Reset,
    /// Wait, then forward.
    Delay(Duration),
    /// Keep the request until the test releases it ([`FaultProxy::next_held`]).
    Hold,
    /// For a watch: answer 200 with one `ERROR` event carrying a 410 Expired status, as the
    /// apiserver does for a too-old resourceVersion.
    WatchExpired,
    /// One of these, picked by the seeded RNG.
    OneOf(Vec<Action>),
}

type Predicate = Arc<dyn Fn(&RequestInfo) -> bool + Send + Sync>;

/// When to act on which request. Build with [`Rule::new`] and the builder methods.
#[derive(Clone)]
pub struct Rule {
    method: Option<Method>,
    path: Option<Regex>,
    watch: Option<bool>,
    filter: Option<Predicate>,
    action: Action,
    skip: u64,
    times: Option<u64>,
    probability: f64,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule")
            .field("method", &self.method)
            .field("path", &self.path.as_ref().map(Regex::as_str))
            .field("watch", &self.watch)
            .field("filter", &self.filter.is_some())
            .field("action", &self.action)
            .field("skip", &self.skip)
            .field("times", &self.times)
            .field("probability", &self.probability)
            .finish()
    }
}

impl Rule {
    /// A rule that matches every request and always fires `action`.
    pub fn new(action: Action) -> Rule {
        Rule {
            method: None,
            path: None,
            watch: None,
            filter: None,
            action,
            skip: 0,
            times: None,
            probability: 1.0,
        }
    }

    /// Only requests with this method.
    pub fn method(mut self, method: Method) -> Rule {
        self.method = Some(method);
        self
    }

    /// Only requests whose path (without the query) matches `regex`.
    pub fn path(mut self, regex: Regex) -> Rule {
        self.path = Some(regex);
        self
    }

    /// Only watches (`true`) or only other requests (`false`).
    pub fn watch(mut self, watch: bool) -> Rule {
        self.watch = Some(watch);
        self
    }

    /// Only requests for which `f` holds.
    pub fn filter(mut self, f: impl Fn(&RequestInfo) -> bool + Send + Sync + 'static) -> Rule {
        self.filter = Some(Arc::new(f));
        self
    }

    /// Let the first `n` matches through untouched.
    pub fn skip(mut self, n: u64) -> Rule {
        self.skip = n;
        self
    }

    /// Fire at most `n` times.
    pub fn times(mut self, n: u64) -> Rule {
        self.times = Some(n);
        self
    }

    /// Fire on a match with probability `p` (the proxy's seeded RNG).
    pub fn probability(mut self, p: f64) -> Rule {
        self.probability = p;
        self
    }

    fn matches(&self, req: &RequestInfo) -> bool {
        self.method.as_ref().is_none_or(|m| *m == req.method)
            && self.path.as_ref().is_none_or(|r| r.is_match(&req.path))
            && self.watch.is_none_or(|w| w == req.watch)
            && self.filter.as_ref().is_none_or(|f| f(req))
    }
}

/// How many requests a rule matched (its method, path, watch and filter) and fired on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleCounts {
    pub matched: u64,
    pub fired: u64,
}

/// How [`FaultProxy::end_watches`] ends the open watch streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEnd {
    /// End the response cleanly, as an apiserver timeout does.
    Close,
    /// Send an `ERROR` event with a 410 Expired status, then end.
    Expired,
    /// Abort the connection.
    Reset,
}

/// A request kept by an [`Action::Hold`] rule. Dropping it resets the client's connection.
#[derive(Debug)]
pub struct HeldRequest {
    pub rule: RuleId,
    pub info: RequestInfo,
    decide: oneshot::Sender<Release>,
}

#[derive(Debug)]
enum Release {
    Forward,
    Reset,
    Respond(u16),
}

impl HeldRequest {
    /// Forward the request now.
    pub fn release(self) {
        let _ = self.decide.send(Release::Forward);
    }

    /// Close the client's connection without forwarding.
    pub fn reset(self) {
        let _ = self.decide.send(Release::Reset);
    }

    /// Answer with `code` without forwarding.
    pub fn respond(self, code: u16) {
        let _ = self.decide.send(Release::Respond(code));
    }
}

struct RuleState {
    id: RuleId,
    rule: Rule,
    counts: RuleCounts,
}

struct Shared {
    upstream: String,
    client: reqwest::Client,
    rules: Mutex<Vec<RuleState>>,
    rng: Mutex<StdRng>,
    next_id: AtomicU64,
    requests: AtomicU64,
    held: Mutex<VecDeque<HeldRequest>>,
    held_notify: Notify,
    /// Bumped by `end_watches`; open watch streams end when it changes.
    watch_end: watch::Sender<(u64, WatchEnd)>,
    open_watches: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The running proxy; dropped means stopped (its listener and open connections close).
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy on `127.0.0.1:<free port>` in front of `upstream` (`https://host:port`),
    /// trusting `ca_pem`; `seed` seeds the RNG of probabilistic rules and [`Action::OneOf`].
    pub async fn start(upstream: &str, ca_pem: &str, seed: u64) -> Result<FaultProxy, ProxyError> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Losing a race with another installer is fine: a provider is set either way.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let certs =
            reqwest::Certificate::from_pem_bundle(ca_pem.as_bytes()).map_err(ProxyError::Ca)?;
        let client = reqwest::Client::builder()
            .tls_certs_merge(certs)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(ProxyError::Client)?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(ProxyError::Bind)?;
        let addr = listener.local_addr().map_err(ProxyError::Bind)?;
        let (watch_end, _) = watch::channel((0, WatchEnd::Close));
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_string(),
            client,
            rules: Mutex::new(Vec::new()),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            next_id: AtomicU64::new(1),
            requests: AtomicU64::new(0),
            held: Mutex::new(VecDeque::new()),
            held_notify: Notify::new(),
            watch_end,
            open_watches: AtomicU64::new(0),
        });
        let (shutdown, shutdown_rx) = watch::channel(false);
        tokio::spawn(accept_loop(listener, shared.clone(), shutdown_rx));
        Ok(FaultProxy {
            addr,
            shared,
            shutdown,
        })
    }

    /// `http://127.0.0.1:<port>`: the server to give the clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Adds `rule` after the existing ones.
    pub fn add(&self, rule: Rule) -> RuleId {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.shared.rules).push(RuleState {
            id,
            rule,
            counts: RuleCounts::default(),
        });
        id
    }

    /// Removes a rule; its counts are returned one last time.
    pub fn remove(&self, id: RuleId) -> Result<RuleCounts, ProxyError> {
        let mut rules = lock(&self.shared.rules);
        let at = rules
            .iter()
            .position(|r| r.id == id)
            .ok_or(ProxyError::NoRule(id))?;
        Ok(rules.remove(at).counts)
    }

    /// Removes every rule and releases every held request (forwarded).
    pub fn clear(&self) {
        lock(&self.shared.rules).clear();
        for held in lock(&self.shared.held).drain(..) {
            held.release();
        }
    }

    /// The counts of rule `id`.
    pub fn counts(&self, id: RuleId) -> Result<RuleCounts, ProxyError> {
        lock(&self.shared.rules)
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.counts)
            .ok_or(ProxyError::NoRule(id))
    }

    /// All requests the proxy has received.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// Watch streams open now.
    pub fn open_watches(&self) -> u64 {
        self.shared.open_watches.load(Ordering::Relaxed)
    }

    /// Ends every open watch stream now, the way `how` says.
    pub fn end_watches(&self, how: WatchEnd) {
        self.shared.watch_end.send_modify(|(n, h)| {
            *n += 1;
            *h = how;
        });
    }

    /// Waits until rule `id` holds a request, and hands it over.
    pub async fn next_held(
        &self,
        id: RuleId,
        timeout: Duration,
    ) -> Result<HeldRequest, ProxyError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.held_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut held = lock(&self.shared.held);
                if let Some(at) = held.iter().position(|h| h.rule == id)
                    && let Some(h) = held.remove(at)
                {
                    return Ok(h);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(ProxyError::NotHeld { rule: id, timeout });
            }
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.clear();
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // A dropped connection then ends with a RST, as a crashed peer's would.
        let _ = stream.set_zero_linger();
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let kill = Arc::new(Notify::new());
            let svc_kill = kill.clone();
            let service = service_fn(move |req| handle(shared.clone(), svc_kill.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = kill.notified() => {}
                _ = shutdown.changed() => {}
            }
        });
    }
}

fn full(body: impl Into<Bytes>) -> ProxyBody {
    Full::new(body.into())
        .map_err(|e| match e {})
        .boxed_unsync()
}

fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// A `metav1.Status` like the apiserver's for `code` on `req`.
pub fn status_body(code: u16, req: &RequestInfo) -> serde_json::Value {
    let reason = reason_of(code);
    let message = match code {
        409 => format!(
            "Operation cannot be fulfilled on {}: the object has been modified; please apply your changes to the latest version and try again ({INJECTED})",
            req.path
        ),
        410 => format!("too old resource version ({INJECTED})"),
        422 => format!("{} is invalid: {INJECTED}", req.path),
        500 => format!("Internal error occurred: {INJECTED}"),
        _ => format!("{reason} ({INJECTED})"),
    };
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code
    })
}

fn respond(code: u16, req: &RequestInfo) -> Response<ProxyBody> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = Response::new(full(status_body(code, req).to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    if code == 429 || code == 503 {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    resp
}

fn watch_expired(req: &RequestInfo) -> Response<ProxyBody> {
    let event = json!({"type": "ERROR", "object": status_body(410, req)});
    let mut resp = Response::new(full(format!("{event}\n")));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn is_watch(path: &str, query: &str) -> bool {
    path.contains("/watch/")
        || query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1")
}

/// Picks the action for `info`: the first rule that matches and fires. Updates the counts.
fn decide(shared: &Shared, id_info: &RequestInfo) -> Option<(RuleId, Action)> {
    let mut rules = lock(&shared.rules);
    for r in rules.iter_mut() {
        if !r.rule.matches(id_info) {
            continue;
        }
        let index = r.counts.matched;
        r.counts.matched += 1;
        if index < r.rule.skip || r.rule.times.is_some_and(|t| r.counts.fired >= t) {
            continue;
        }
        if r.rule.probability < 1.0 && lock(&shared.rng).random::<f64>() >= r.rule.probability {
            continue;
        }
        r.counts.fired += 1;
        return Some((r.id, r.rule.action.clone()));
    }
    None
}

async fn handle(
    shared: Arc<Shared>,
    kill: Arc<Notify>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, std::convert::Infallible> {
    shared.requests.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(reset(&kill).await),
    };
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or_default().to_string();
    let info = RequestInfo {
        watch: is_watch(&path, &query),
        method: parts.method.clone(),
        path,
        query,
        body,
    };
    let mut action = decide(&shared, &info);
    loop {
        match action {
            None | Some((_, Action::Pass)) => break,
            Some((_, Action::Respond(code))) => return Ok(respond(code, &info)),
            Some((_, Action::Reset)) => return Ok(reset(&kill).await),
            Some((_, Action::WatchExpired)) => return Ok(watch_expired(&info)),
            Some((_, Action::Delay(d))) => {
                tokio::time::sleep(d).await;
                break;
            }
            Some((id, Action::OneOf(choices))) => {
                if choices.is_empty() {
                    break;
                }
                let at = lock(&shared.rng).random_range(0..choices.len());
                action = choices.get(at).cloned().map(|a| (id, a));
            }
            Some((id, Action::Hold)) => {
                let (tx, rx) = oneshot::channel();
                lock(&shared.held).push_back(HeldRequest {
                    rule: id,
                    info: info.clone(),
                    decide: tx,
                });
                shared.held_notify.notify_waiters();
                match rx.await {
                    Ok(Release::Forward) => break,
                    Ok(Release::Respond(code)) => return Ok(respond(code, &info)),
                    Ok(Release::Reset) | Err(_) => return Ok(reset(&kill).await),
                }
            }
        }
    }
    Ok(forward(&shared, parts.method, &parts.uri, &parts.headers, info).await)
}

/// Drops the client's connection (the connection task ends on `kill`); never answers.
async fn reset(kill: &Notify) -> Response<ProxyBody> {
    kill.notify_one();
    std::future::pending().await
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
];

async fn forward(
    shared: &Arc<Shared>,
    method: Method,
    uri: &http::Uri,
    headers: &HeaderMap,
    info: RequestInfo,
) -> Response<ProxyBody> {
    let target = format!(
        "{}{}",
        shared.upstream,
        uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut rb = shared.client.request(method, &target);
    for (k, v) in headers {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            rb = rb.header(k, v);
        }
    }
    let upstream = match rb.body(info.body.clone()).send().await {
        Ok(r) => r,
        Err(e) => {
            // Not injected: the apiserver could not be reached. Said so in the Status.
            let mut resp = respond(503, &info);
            let mut body = status_body(503, &info);
            body["message"] = json!(format!(
                "the fault proxy could not reach the apiserver: {e}"
            ));
            *resp.body_mut() = full(body.to_string());
            return resp;
        }
    };
    let mut builder = Response::builder().status(upstream.status());
    for (k, v) in upstream.headers() {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            builder = builder.header(k, v);
        }
    }
    let chunks = upstream.bytes_stream().map(|c| c.map_err(BoxError::from));
    let body: ProxyBody = if info.watch {
        BodyExt::boxed_unsync(StreamBody::new(WatchStream::new(
            shared.clone(),
            Box::pin(chunks),
            &info,
        )))
    } else {
        BodyExt::boxed_unsync(StreamBody::new(chunks.map(|c| c.map(Frame::data))))
    };
    builder.body(body).unwrap_or_else(|_| respond(500, &info))
}

type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, BoxError>> + Send>>;

/// A watch response body that ends when [`FaultProxy::end_watches`] is called.
struct WatchStream {
    inner: Pin<Box<dyn Stream<Item = Result<Frame<Bytes>, BoxError>> + Send>>,
}

/// Counts an open watch; uncounts it when the stream is dropped.
struct OpenWatch(Arc<Shared>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::Relaxed);
    }
}

impl WatchStream {
    fn new(shared: Arc<Shared>, chunks: Chunks, info: &RequestInfo) -> WatchStream {
        shared.open_watches.fetch_add(1, Ordering::Relaxed);
        let mut end = shared.watch_end.subscribe();
        end.mark_unchanged();
        let expired = json!({"type": "ERROR", "object": status_body(410, info)}).to_string() + "\n";
        let state = (chunks, end, OpenWatch(shared), false);
        let inner = futures::stream::unfold(state, move |(mut chunks, mut end, open, done)| {
            let expired = expired.clone();
            async move {
                if done {
                    return None;
                }
                tokio::select! {
                    c = chunks.next() => c.map(|c| (c.map(Frame::data), (chunks, end, open, false))),
                    changed = end.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                        let how = end.borrow().1;
                        match how {
                            WatchEnd::Close => None,
                            WatchEnd::Expired => Some((
                                Ok(Frame::data(Bytes::from(expired))),
                                (chunks, end, open, true),
                            )),
                            WatchEnd::Reset => Some((
                                Err(BoxError::from("watch reset by the fault proxy")),
                                (chunks, end, open, true),
                            )),
                        }
                    }
                }
            }
        });
        WatchStream {
            inner: Box::pin(inner),
        }
    }
}

impl Stream for WatchStream {
    type Item = Result<Frame<Bytes>, BoxError>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}
