//! Telemetry of the Quiver host: logs, request ids, lock-free call counters, transcripts and the
//! statistics read back from them.
//!
//! Principal types:
//! - [`init_logging`] / [`init`]: the `tracing` subscriber: logs on **stderr only** (stdout
//!   belongs to the MCP stdio transport), as text or JSON lines ([`LogFormat`]), filtered by
//!   `RUST_LOG` (default `info`); safe to call twice. With the `otlp` feature and
//!   [`OtlpSettings`], it also starts trace export ([`trace_export`]).
//! - Trace export: a call with export on keeps a fixed-size [`CallTrace`] (stage boundaries as
//!   `Instant`s, typed attributes, the client's [`TraceParent`]) and hands it to a bounded
//!   non-blocking queue ([`TraceExport`]); an exporter thread builds the spans (one per call, a
//!   child per pipeline stage and per host-service round trip, parented to the client's span
//!   when it sent a W3C `traceparent`) and exports them over OTLP/HTTP+protobuf (`otlp.rs`).
//!   Off by default; off, a call holds no record.
//! - [`next_request_id`]: short, process-unique request ids (`<prefix>-<counter>`).
//! - [`Counters`]: atomics updated on every call (per lane, per tool, per error code, retries,
//!   breaker states, generic-lane use, surface schema counts) and a duration histogram;
//!   [`Counters::record_call`] also emits the call's `tracing` event. [`Counters::snapshot`]
//!   gives a serializable [`Stats`].
//! - [`TranscriptRecord`] (one JSON line per call) and [`TranscriptWriter`] (appends them from a
//!   background thread, one file per session); [`stats_from_transcript`] summarizes a file
//!   (`quiver stats TRANSCRIPT`).
//!
//! - [`Metrics`]: Prometheus metrics (the `metrics` crate with its Prometheus recorder, no global
//!   recorder, no listener): handles pre-registered per tool ([`ToolMetrics`]), bounded labels,
//!   [`Metrics::render`] gives the text exposition the transports serve on `/metrics`.
//!
//! What this crate does not do: decide anything about a call (the router does), replay
//! transcripts (`quiver-router`), or serve anything over the network (the MCP transports do).

mod counters;
mod logging;
mod metrics;
#[cfg(feature = "otlp")]
mod otlp;
mod request_id;
mod stats;
mod trace;
mod transcript;

pub use counters::{BreakerState, CallEvent, Counters, Lane, ToolCounters, ToolTotals};
pub use logging::{LogFormat, OtlpSettings, TelemetryGuard, init, init_logging};
pub use metrics::{LimitScope, META_TOOLS, MetricLane, Metrics, ToolMetrics};
#[cfg(feature = "otlp")]
pub use otlp::{DiscardingExport, discarded_spans, discarding_export};
pub use request_id::next_request_id;
pub use stats::{
    DurationStats, GenericStats, LaneStats, Stats, StatusCounts, SurfaceCounts, ToolStats, stats_from_transcript,
};
pub use trace::{
    CallTrace, HostService, HostTrip, HostTrips, RawTrip, TRACE_QUEUE, TRACE_STAGES, TraceExport, TraceMessage,
    TraceParent, TripStart, trace_export,
};
pub use transcript::{
    DEFAULT_TRANSCRIPT_KEEP, DEFAULT_TRANSCRIPT_MAX_BYTES, TRANSCRIPT_FORMAT, TranscriptEvent, TranscriptLine,
    TranscriptRecord, TranscriptWriter, read_transcript_lines, transcript_file_name,
};
