//! Prometheus metrics with the names Flux's controllers and dashboards use:
//! the `gotk_*` recorder metrics, the controller-runtime and workqueue metrics, the client-go
//! `rest_client_requests_total`, leader election status and `process_*` metrics.
//! See `docs/metrics.md` for the list and for what is approximated.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{
    Counter, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Errors while registering or encoding metrics.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The prometheus crate refused a metric (duplicate name, bad labels...).
    #[error("prometheus: {0}")]
    Prometheus(#[from] prometheus::Error),
}

/// Outcome label of `controller_runtime_reconcile_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Reconcile returned without requeue.
    Success,
    /// Reconcile returned an error.
    Error,
    /// Reconcile asked for an immediate requeue.
    Requeue,
    /// Reconcile asked for a requeue after a delay.
    RequeueAfter,
}

impl ReconcileResult {
    /// The label value controller-runtime uses.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Requeue => "requeue",
            Self::RequeueAfter => "requeue_after",
        }
    }

    /// All label values (series are initialised to zero at start, as controller-runtime does).
    pub const ALL: [ReconcileResult; 4] = [
        Self::Success,
        Self::Error,
        Self::Requeue,
        Self::RequeueAfter,
    ];
}

/// `ExponentialBucketsRange(min, max, count)` from the Go client: `count` buckets from `min` to
/// `max` growing by a constant factor.
pub fn exponential_buckets_range(min: f64, max: f64, count: usize) -> Vec<f64> {
    if count == 0 || min <= 0.0 || max <= min {
        return vec![min];
    }
    if count == 1 {
        return vec![min];
    }
    let steps = (count - 1) as f64;
    let factor = (max / min).powf(1.0 / steps);
    (0..count).map(|i| min * factor.powi(i as i32)).collect()
}

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
pub const RECONCILE_TIME_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Per-controller in-flight reconciles, used for the workqueue "unfinished work" gauges.
#[derive(Debug, Default)]
struct InFlight {
    next_id: AtomicU64,
    started: Mutex<HashMap<u64, Instant>>,
}

/// All metrics of one controller process, in one registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<MetricsInner>,
}

#[derive(Debug)]
struct MetricsInner {
    registry: Registry,
    reconcile_duration: HistogramVec,
    reconcile_condition: GaugeVec,
    suspend_status: GaugeVec,
    reconcile_total: IntCounterVec,
    reconcile_errors: IntCounterVec,
    reconcile_panics: IntCounterVec,
    reconcile_time: HistogramVec,
    active_workers: IntGaugeVec,
    max_concurrent: IntGaugeVec,
    wq_depth: IntGaugeVec,
    wq_adds: IntCounterVec,
    wq_queue_duration: HistogramVec,
    wq_work_duration: HistogramVec,
    wq_unfinished: GaugeVec,
    wq_longest: GaugeVec,
    wq_retries: IntCounterVec,
    rest_requests: IntCounterVec,
    rest_latency: HistogramVec,
    leader_status: IntGaugeVec,
    build_info: IntGaugeVec,
    process: ProcessMetrics,
    in_flight: Mutex<HashMap<String, Arc<InFlight>>>,
    condition_types: Mutex<ObjectConditionTypes>,
}

type ObjectConditionTypes = HashMap<(String, String, String), BTreeSet<String>>;

#[derive(Debug)]
struct ProcessMetrics {
    cpu: Counter,
    rss: Gauge,
    vsz: Gauge,
    start: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    go_alloc: Gauge,
}

fn hist(
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> Result<HistogramVec, MetricsError> {
    Ok(HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets),
        labels,
    )?)
}

impl Metrics {
    /// Creates and registers every metric in a fresh registry.
    pub fn new() -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let reconcile_duration = hist(
            "gotk_reconcile_duration_seconds",
            "The duration in seconds of a gitops toolkit resource reconciliation.",
            &["kind", "name", "namespace"],
            exponential_buckets_range(0.01, 1800.0, 10),
        )?;
        let reconcile_condition = GaugeVec::new(
            Opts::new(
                "gotk_reconcile_condition",
                "The current condition status of a GitOps Toolkit resource reconciliation.",
            ),
            &["kind", "name", "namespace", "type", "status"],
        )?;
        let suspend_status = GaugeVec::new(
            Opts::new(
                "gotk_suspend_status",
                "The current suspend status of a GitOps Toolkit resource.",
            ),
            &["kind", "name", "namespace"],
        )?;
        let reconcile_total = IntCounterVec::new(
            Opts::new(
                "controller_runtime_reconcile_total",
                "Total number of reconciliations per controller",
            ),
            &["controller", "result"],
        )?;
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
            ),
            &["controller"],
        )?;
        let reconcile_panics = IntCounterVec::new(
            Opts::new(
                "controller_runtime_reconcile_panics_total",
                "Total number of reconciliation panics per controller",
            ),
            &["controller"],
        )?;
        let reconcile_time = hist(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            &["controller"],
            RECONCILE_TIME_BUCKETS.to_vec(),
        )?;
        let active_workers = IntGaugeVec::new(
            Opts::new(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
            ),
            &["controller"],
        )?;
        let max_concurrent = IntGaugeVec::new(
            Opts::new(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
            ),
            &["controller"],
        )?;
        let wq_labels = ["name", "controller"];
        let wq_depth = IntGaugeVec::new(
            Opts::new("workqueue_depth", "Current depth of workqueue"),
            &wq_labels,
        )?;
        let wq_adds = IntCounterVec::new(
            Opts::new(
                "workqueue_adds_total",
                "Total number of adds handled by workqueue",
            ),
            &wq_labels,
        )?;
        let wq_buckets = prometheus::exponential_buckets(10e-9, 10.0, 12)?;
        let wq_queue_duration = hist(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            &wq_labels,
            wq_buckets.clone(),
        )?;
        let wq_work_duration = hist(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            &wq_labels,
            wq_buckets,
        )?;
        let wq_unfinished = GaugeVec::new(
            Opts::new(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration.",
            ),
            &wq_labels,
        )?;
        let wq_longest = GaugeVec::new(
            Opts::new(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
            ),
            &wq_labels,
        )?;
        let wq_retries = IntCounterVec::new(
            Opts::new(
                "workqueue_retries_total",
                "Total number of retries handled by workqueue",
            ),
            &wq_labels,
        )?;
        let rest_requests = IntCounterVec::new(
            Opts::new(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host.",
            ),
            &["code", "method", "host"],
        )?;
        let rest_latency = hist(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            &["verb", "host"],
            vec![
                0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
            ],
        )?;
        let leader_status = IntGaugeVec::new(
            Opts::new(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ),
            &["name"],
        )?;
        let build_info = IntGaugeVec::new(
            Opts::new(
                "go_info",
                "Information about the build (rflux emits this Go-named series so Flux dashboards count controllers).",
            ),
            &["version"],
        )?;
        let process = ProcessMetrics {
            cpu: Counter::new(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
            )?,
            rss: Gauge::new(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
            )?,
            vsz: Gauge::new(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
            )?,
            start: Gauge::new(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
            )?,
            open_fds: Gauge::new("process_open_fds", "Number of open file descriptors.")?,
            max_fds: Gauge::new(
                "process_max_fds",
                "Maximum number of open file descriptors.",
            )?,
            go_alloc: Gauge::new(
                "go_memstats_alloc_bytes",
                "Approximation for Flux dashboards: the resident set size of this (non-Go) process.",
            )?,
        };
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(reconcile_condition.clone()))?;
        registry.register(Box::new(suspend_status.clone()))?;
        registry.register(Box::new(reconcile_total.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_panics.clone()))?;
        registry.register(Box::new(reconcile_time.clone()))?;
        registry.register(Box::new(active_workers.clone()))?;
        registry.register(Box::new(max_concurrent.clone()))?;
        registry.register(Box::new(wq_depth.clone()))?;
        registry.register(Box::new(wq_adds.clone()))?;
        registry.register(Box::new(wq_queue_duration.clone()))?;
        registry.register(Box::new(wq_work_duration.clone()))?;
        registry.register(Box::new(wq_unfinished.clone()))?;
        registry.register(Box::new(wq_longest.clone()))?;
        registry.register(Box::new(wq_retries.clone()))?;
        registry.register(Box::new(rest_requests.clone()))?;
        registry.register(Box::new(rest_latency.clone()))?;
        registry.register(Box::new(leader_status.clone()))?;
        registry.register(Box::new(build_info.clone()))?;
        registry.register(Box::new(process.cpu.clone()))?;
        registry.register(Box::new(process.rss.clone()))?;
        registry.register(Box::new(process.vsz.clone()))?;
        registry.register(Box::new(process.start.clone()))?;
        registry.register(Box::new(process.open_fds.clone()))?;
        registry.register(Box::new(process.max_fds.clone()))?;
        registry.register(Box::new(process.go_alloc.clone()))?;
        build_info
            .with_label_values(&[concat!("rflux-", env!("CARGO_PKG_VERSION"))])
            .set(1);
        Ok(Self {
            inner: Arc::new(MetricsInner {
                registry,
                reconcile_duration,
                reconcile_condition,
                suspend_status,
                reconcile_total,
                reconcile_errors,
                reconcile_panics,
                reconcile_time,
                active_workers,
                max_concurrent,
                wq_depth,
                wq_adds,
                wq_queue_duration,
                wq_work_duration,
                wq_unfinished,
                wq_longest,
                wq_retries,
                rest_requests,
                rest_latency,
                leader_status,
                build_info,
                process,
                in_flight: Mutex::new(HashMap::new()),
                condition_types: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The underlying registry (to register more metrics, e.g. artifact-server ones).
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Declares a controller (lowercase kind, e.g. `gitrepository`): sets
    /// `controller_runtime_max_concurrent_reconciles` and initialises all its series to zero.
    pub fn register_controller(&self, controller: &str, max_concurrent: u16) -> ControllerMetrics {
        let i = &self.inner;
        i.max_concurrent
            .with_label_values(&[controller])
            .set(i64::from(max_concurrent));
        i.active_workers.with_label_values(&[controller]).set(0);
        for r in ReconcileResult::ALL {
            i.reconcile_total
                .with_label_values(&[controller, r.as_label()]);
        }
        i.reconcile_errors.with_label_values(&[controller]);
        i.reconcile_panics.with_label_values(&[controller]);
        i.reconcile_time.with_label_values(&[controller]);
        let wq = [controller, controller];
        i.wq_depth.with_label_values(&wq).set(0);
        i.wq_adds.with_label_values(&wq);
        i.wq_queue_duration.with_label_values(&wq);
        i.wq_work_duration.with_label_values(&wq);
        i.wq_unfinished.with_label_values(&wq).set(0.0);
        i.wq_longest.with_label_values(&wq).set(0.0);
        i.wq_retries.with_label_values(&wq);
        let in_flight = {
            let mut map = match i.in_flight.lock() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            map.entry(controller.to_string()).or_default().clone()
        };
        ControllerMetrics {
            metrics: self.clone(),
            controller: controller.to_string(),
            in_flight,
        }
    }

    /// Records `gotk_reconcile_duration_seconds{kind,name,namespace}`.
    pub fn record_duration(&self, kind: &str, name: &str, namespace: &str, elapsed: Duration) {
        self.inner
            .reconcile_duration
            .with_label_values(&[kind, name, namespace])
            .observe(elapsed.as_secs_f64());
    }

    /// Records `gotk_reconcile_condition` for one condition type: 1 on the current status, 0 on the
    /// two others (the recorder Flux kept in pkg/runtime/metrics). With `deleted`, drops the series.
    pub fn record_condition(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
        type_: &str,
        status: &str,
        deleted: bool,
    ) {
        if !deleted {
            let key = (kind.to_string(), name.to_string(), namespace.to_string());
            match self.inner.condition_types.lock() {
                Ok(mut m) => m.entry(key).or_default().insert(type_.to_string()),
                Err(p) => p
                    .into_inner()
                    .entry(key)
                    .or_default()
                    .insert(type_.to_string()),
            };
        }
        for s in ["True", "False", "Unknown", "Deleted"] {
            let labels = [kind, name, namespace, type_, s];
            if deleted {
                let _ = self.inner.reconcile_condition.remove_label_values(&labels);
            } else {
                let v = if s == status { 1.0 } else { 0.0 };
                self.inner
                    .reconcile_condition
                    .with_label_values(&labels)
                    .set(v);
            }
        }
    }

    /// Records `gotk_suspend_status`.
    pub fn record_suspend(&self, kind: &str, name: &str, namespace: &str, suspended: bool) {
        self.inner
            .suspend_status
            .with_label_values(&[kind, name, namespace])
            .set(if suspended { 1.0 } else { 0.0 });
    }

    /// Drops the per-object series (object deleted and finalizer gone).
    pub fn delete_object(&self, kind: &str, name: &str, namespace: &str) {
        let _ = self
            .inner
            .reconcile_duration
            .remove_label_values(&[kind, name, namespace]);
        let _ = self
            .inner
            .suspend_status
            .remove_label_values(&[kind, name, namespace]);
        let key = (kind.to_string(), name.to_string(), namespace.to_string());
        let types = match self.inner.condition_types.lock() {
            Ok(mut m) => m.remove(&key),
            Err(p) => p.into_inner().remove(&key),
        };
        for type_ in types.unwrap_or_default() {
            self.record_condition(kind, name, namespace, &type_, "", true);
        }
    }

    /// Records one Kubernetes API request (`rest_client_requests_total`, latency).
    pub fn record_rest_request(&self, code: &str, method: &str, host: &str, elapsed: Duration) {
        self.inner
            .rest_requests
            .with_label_values(&[code, method, host])
            .inc();
        self.inner
            .rest_latency
            .with_label_values(&[method, host])
            .observe(elapsed.as_secs_f64());
    }

    /// Sets `leader_election_master_status{name}`.
    pub fn set_leader(&self, lease_name: &str, leading: bool) {
        self.inner
            .leader_status
            .with_label_values(&[lease_name])
            .set(i64::from(leading));
    }

    /// Refreshes the scrape-time gauges (process stats, in-flight work) and encodes the registry
    /// in the Prometheus text format 0.0.4.
    pub fn encode(&self) -> Result<String, MetricsError> {
        self.refresh();
        let families = self.inner.registry.gather();
        Ok(TextEncoder::new().encode_to_string(&families)?)
    }

    fn refresh(&self) {
        let i = &self.inner;
        let map = match i.in_flight.lock() {
            Ok(m) => m.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let now = Instant::now();
        for (controller, flight) in map {
            let started = match flight.started.lock() {
                Ok(s) => s.values().copied().collect::<Vec<_>>(),
                Err(p) => p.into_inner().values().copied().collect(),
            };
            let ages: Vec<f64> = started
                .iter()
                .map(|s| now.saturating_duration_since(*s).as_secs_f64())
                .collect();
            let wq = [controller.as_str(), controller.as_str()];
            i.wq_unfinished
                .with_label_values(&wq)
                .set(ages.iter().sum());
            i.wq_longest
                .with_label_values(&wq)
                .set(ages.iter().copied().fold(0.0, f64::max));
        }
        if let Some(stats) = read_process_stats() {
            let p = &i.process;
            let delta = stats.cpu_seconds - p.cpu.get();
            if delta > 0.0 {
                p.cpu.inc_by(delta);
            }
            p.rss.set(stats.rss_bytes);
            p.vsz.set(stats.vsz_bytes);
            p.go_alloc.set(stats.rss_bytes);
            if let Some(start) = stats.start_time_seconds {
                p.start.set(start);
            }
            p.open_fds.set(stats.open_fds);
            if let Some(max) = stats.max_fds {
                p.max_fds.set(max);
            }
        }
        let _ = &i.build_info;
    }
}

/// Metrics handle for one controller; create it with [`Metrics::register_controller`].
#[derive(Debug, Clone)]
pub struct ControllerMetrics {
    metrics: Metrics,
    controller: String,
    in_flight: Arc<InFlight>,
}

/// Tracks one running reconcile; finish it with [`ReconcileGuard::finish`]. Dropping it without
/// finishing counts as a panic (`controller_runtime_reconcile_panics_total`).
#[derive(Debug)]
pub struct ReconcileGuard {
    owner: ControllerMetrics,
    id: u64,
    started: Instant,
    finished: bool,
}

impl ControllerMetrics {
    /// Controller label value.
    pub fn controller(&self) -> &str {
        &self.controller
    }

    /// Marks the start of a reconcile (active workers +1, workqueue add).
    pub fn start(&self) -> ReconcileGuard {
        let i = &self.metrics.inner;
        let wq = [self.controller.as_str(), self.controller.as_str()];
        i.wq_adds.with_label_values(&wq).inc();
        i.active_workers
            .with_label_values(&[&self.controller])
            .inc();
        let id = self.in_flight.next_id.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        match self.in_flight.started.lock() {
            Ok(mut m) => m.insert(id, started),
            Err(p) => p.into_inner().insert(id, started),
        };
        ReconcileGuard {
            owner: self.clone(),
            id,
            started,
            finished: false,
        }
    }

    /// Counts a retry scheduled by the error policy (`workqueue_retries_total`).
    pub fn record_retry(&self) {
        let wq = [self.controller.as_str(), self.controller.as_str()];
        self.metrics.inner.wq_retries.with_label_values(&wq).inc();
    }

    /// Metrics registry handle.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl ReconcileGuard {
    /// Records the outcome: `controller_runtime_reconcile_total{result}`, errors, time histograms.
    pub fn finish(mut self, result: ReconcileResult) -> Duration {
        self.finished = true;
        let elapsed = self.started.elapsed();
        let c = self.owner.controller.clone();
        let i = &self.owner.metrics.inner;
        i.reconcile_total
            .with_label_values(&[c.as_str(), result.as_label()])
            .inc();
        if result == ReconcileResult::Error {
            i.reconcile_errors.with_label_values(&[c.as_str()]).inc();
        }
        i.reconcile_time
            .with_label_values(&[c.as_str()])
            .observe(elapsed.as_secs_f64());
        i.wq_work_duration
            .with_label_values(&[c.as_str(), c.as_str()])
            .observe(elapsed.as_secs_f64());
        elapsed
    }
}

impl Drop for ReconcileGuard {
    fn drop(&mut self) {
        let c = self.owner.controller.as_str();
        let i = &self.owner.metrics.inner;
        i.active_workers.with_label_values(&[c]).dec();
        match self.owner.in_flight.started.lock() {
            Ok(mut m) => m.remove(&self.id),
            Err(p) => p.into_inner().remove(&self.id),
        };
        if !self.finished {
            i.reconcile_panics.with_label_values(&[c]).inc();
        }
    }
}

/// Process statistics read from `/proc/self` (Linux only; `None` elsewhere or on error).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessStats {
    /// utime + stime in seconds.
    pub cpu_seconds: f64,
    /// Resident set size.
    pub rss_bytes: f64,
    /// Virtual memory size.
    pub vsz_bytes: f64,
    /// Process start time since the epoch.
    pub start_time_seconds: Option<f64>,
    /// Open file descriptors.
    pub open_fds: f64,
    /// Soft limit of open files.
    pub max_fds: Option<f64>,
}

/// Linux `USER_HZ` (fixed at 100 for the userspace ABI on every mainstream architecture).
const CLOCK_TICKS: f64 = 100.0;

/// Parses `/proc/<pid>/stat`: returns (utime+stime seconds, start ticks since boot, vsize bytes).
pub fn parse_proc_stat(stat: &str) -> Option<(f64, u64, f64)> {
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // after ')' : field index 0 is "state" (field 3 of the man page).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let start: u64 = fields.get(19)?.parse().ok()?;
    let vsize: f64 = fields.get(20)?.parse().ok()?;
    Some(((utime + stime) / CLOCK_TICKS, start, vsize))
}

/// Reads `VmRSS` (bytes) from `/proc/<pid>/status` text.
pub fn parse_status_rss(status: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0)
}

fn read_process_stats() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (cpu_seconds, start_ticks, vsz_bytes) = parse_proc_stat(&stat)?;
    let rss_bytes = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_status_rss(&s))
        .unwrap_or(0.0);
    let boot_time = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    let start_time_seconds = boot_time.map(|b| b + start_ticks as f64 / CLOCK_TICKS);
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as f64)
        .unwrap_or(0.0);
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse::<f64>().ok())
        });
    Some(ProcessStats {
        cpu_seconds,
        rss_bytes,
        vsz_bytes,
        start_time_seconds,
        open_fds,
        max_fds,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_parses_names_with_spaces() {
        let stat = "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 98765 123456789 2000 18446744073709551615";
        let (cpu, start, vsz) = parse_proc_stat(stat).unwrap();
        assert!((cpu - 3.0).abs() < 1e-9);
        assert_eq!(start, 98765);
        assert!((vsz - 123_456_789.0).abs() < 1e-3);
        assert!(parse_proc_stat("garbage").is_none());
    }

    #[test]
    fn status_rss() {
        assert_eq!(
            parse_status_rss("Name:\tx\nVmRSS:\t  2048 kB\n"),
            Some(2048.0 * 1024.0)
        );
        assert_eq!(parse_status_rss("Name:\tx\n"), None);
    }
}
