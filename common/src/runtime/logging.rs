//! Logs shaped like Flux's (controller-runtime + zap): one JSON object per line with `level`, `ts`,
//! `logger` (when set), `msg`, the controller-runtime keys of the enclosing spans (`controller`,
//! `controllerGroup`, `controllerKind`, `<Kind>: {name, namespace}`, `name`, `namespace`,
//! `reconcileID`) and the event's own fields (`error`, `revision`, ...). `console` encoding gives
//! zap's tab-separated development format.
//!
//! Use [`reconcile_span()`] around a reconcile so every line inside carries the object keys.

use std::fmt::Write as _;
use std::io::Write as _;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use super::flags::{LogEncoding, LogLevel};

/// Errors while installing the logger.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// A global subscriber was already installed.
    #[error("cannot install the logger: {0}")]
    Install(String),
    /// The filter directive was invalid.
    #[error("invalid log filter: {0}")]
    Filter(String),
}

/// The filter directive for a `--log-level`: our crates at that level, noisy HTTP/TLS internals
/// capped at `info`.
pub fn filter_directive(level: LogLevel) -> String {
    let l = match level {
        LogLevel::Trace => "trace",
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    };
    let cap = match level {
        LogLevel::Trace | LogLevel::Debug => "info",
        _ => l,
    };
    format!("{l},hyper={cap},hyper_util={cap},h2={cap},rustls={cap},tower={cap},kube_client={cap}")
}

/// Installs the global logger writing to stderr (as zap does in controller-runtime).
/// `RUST_LOG`, when set, overrides the level filter.
pub fn init_logging(level: LogLevel, encoding: LogEncoding) -> Result<(), LoggingError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(v),
        _ => EnvFilter::try_new(filter_directive(level)),
    }
    .map_err(|e| LoggingError::Filter(e.to_string()))?;
    tracing_subscriber::registry()
        .with(filter)
        .with(ZapLayer::new(encoding, std::io::stderr))
        .try_init()
        .map_err(|e| LoggingError::Install(e.to_string()))
}

/// A subscriber writing to `writer` (for tests and embedding).
pub fn subscriber_with_writer<W>(
    level: LogLevel,
    encoding: LogEncoding,
    writer: W,
) -> Result<impl Subscriber + Send + Sync, LoggingError>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(filter_directive(level))
        .map_err(|e| LoggingError::Filter(e.to_string()))?;
    Ok(tracing_subscriber::registry()
        .with(filter)
        .with(ZapLayer::new(encoding, writer)))
}

/// Creates the span controller-runtime attaches to a reconcile; enter it (or `.instrument()` the
/// reconcile future) so every log line carries the object keys.
pub fn reconcile_span(
    controller: &str,
    group: &str,
    kind: &str,
    name: &str,
    namespace: &str,
    reconcile_id: &str,
) -> tracing::Span {
    tracing::info_span!(
        "reconcile",
        controller = %controller,
        controllerGroup = %group,
        controllerKind = %kind,
        name = %name,
        namespace = %namespace,
        reconcileID = %reconcile_id
    )
}

/// A random UUIDv4-shaped reconcile ID, as controller-runtime uses.
pub fn new_reconcile_id() -> String {
    let b: [u8; 16] = rand::random();
    let mut bytes = b;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().fold(String::with_capacity(32), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    });
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Fields recorded on a span, kept in its extensions.
#[derive(Debug, Default, Clone)]
struct SpanFields(Map<String, Value>);

struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl Visit for JsonVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            Value::String(format!("{value:?}")),
        );
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().to_string(), Value::String(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().to_string(), Value::String(value.to_string()));
    }
}

/// The layer writing zap-shaped lines.
pub struct ZapLayer<W> {
    encoding: LogEncoding,
    writer: W,
}

impl<W> ZapLayer<W> {
    /// New layer.
    pub fn new(encoding: LogEncoding, writer: W) -> Self {
        Self { encoding, writer }
    }
}

/// zap's lowercase level names.
pub fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "trace",
        Level::DEBUG => "debug",
        Level::INFO => "info",
        Level::WARN => "warn",
        Level::ERROR => "error",
    }
}

/// Builds one JSON log record from its parts (pure; used by the layer and by tests).
/// `span_fields` are the fields of the enclosing spans, outermost first.
pub fn build_record(
    level: &Level,
    ts: jiff::Timestamp,
    span_fields: &[Map<String, Value>],
    event_fields: Map<String, Value>,
) -> Map<String, Value> {
    let mut merged = Map::new();
    for f in span_fields {
        for (k, v) in f {
            merged.insert(k.clone(), v.clone());
        }
    }
    let mut event_fields = event_fields;
    let msg = event_fields
        .remove("message")
        .or_else(|| event_fields.remove("msg"))
        .unwrap_or(Value::String(String::new()));
    let logger = event_fields
        .remove("logger")
        .or_else(|| merged.remove("logger"));

    let mut out = Map::new();
    out.insert("level".into(), Value::String(level_name(level).into()));
    out.insert("ts".into(), Value::String(format!("{ts:.3}")));
    if let Some(l) = logger {
        out.insert("logger".into(), l);
    }
    out.insert("msg".into(), msg);
    for key in ["controller", "controllerGroup", "controllerKind"] {
        if let Some(v) = merged.remove(key) {
            out.insert(key.into(), v);
        }
    }
    if let Some(Value::String(kind)) = out.get("controllerKind").cloned()
        && let (Some(name), Some(ns)) = (
            merged.get("name").cloned(),
            merged.get("namespace").cloned(),
        )
    {
        let mut obj = Map::new();
        obj.insert("name".into(), name);
        obj.insert("namespace".into(), ns);
        out.insert(kind, Value::Object(obj));
    }
    for key in ["namespace", "name", "reconcileID"] {
        if let Some(v) = merged.remove(key) {
            out.insert(key.into(), v);
        }
    }
    for (k, v) in merged {
        out.insert(k, v);
    }
    for (k, v) in event_fields {
        out.insert(k, v);
    }
    out
}

/// Renders a record as zap's console encoding: `ts<TAB>LEVEL<TAB>[logger<TAB>]msg<TAB>{fields}`.
pub fn render_console(record: &Map<String, Value>) -> String {
    let get = |k: &str| match record.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    };
    let mut line = format!("{}\t{}", get("ts"), get("level").to_uppercase());
    if record.contains_key("logger") {
        line.push('\t');
        line.push_str(&get("logger"));
    }
    line.push('\t');
    line.push_str(&get("msg"));
    let rest: Map<String, Value> = record
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "ts" | "level" | "logger" | "msg"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !rest.is_empty() {
        line.push('\t');
        line.push_str(&Value::Object(rest).to_string());
    }
    line
}

impl<S, W> Layer<S> for ZapLayer<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'a> MakeWriter<'a> + 'static,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = SpanFields::default();
        attrs.record(&mut JsonVisitor(&mut fields.0));
        span.extensions_mut().insert(fields);
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, S>,
    ) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(fields) = ext.get_mut::<SpanFields>() {
            values.record(&mut JsonVisitor(&mut fields.0));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut span_fields = Vec::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(f) = span.extensions().get::<SpanFields>() {
                    span_fields.push(f.0.clone());
                }
            }
        }
        let mut event_fields = Map::new();
        event.record(&mut JsonVisitor(&mut event_fields));
        let record = build_record(
            event.metadata().level(),
            jiff::Timestamp::now(),
            &span_fields,
            event_fields,
        );
        let line = match self.encoding {
            LogEncoding::Json => Value::Object(record).to_string(),
            LogEncoding::Console => render_console(&record),
        };
        let mut w = self.writer.make_writer();
        let _ = writeln!(w, "{line}");
    }
}
