//! Transcripts: every call as one JSON line, appended by a background thread so the call path
//! never waits for the disk.

use std::collections::HashMap;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use quiver_abi::ToolResponse;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Lane;

/// Version of the transcript line format written by this crate.
pub const TRANSCRIPT_FORMAT: u32 = 1;

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptRecord {
    /// Line format version ([`TRANSCRIPT_FORMAT`]).
    pub format: u32,
    /// Request id.
    pub request_id: String,
    /// When the router accepted the call, milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// Wall time of the pipeline, microseconds.
    pub duration_us: u64,
    /// Session id.
    pub session_id: String,
    /// Client name.
    #[serde(default)]
    pub client: String,
    /// Lane.
    pub lane: Lane,
    /// The name as called (for the generic lane: the `name` passed to `run_tool`).
    pub called_name: String,
    /// The arguments as called (before an alias filled in its action).
    pub arguments: Value,
    /// The caller marked the call as confirmed.
    #[serde(default)]
    pub confirmed: bool,
    /// Canonical tool the name resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Consolidated-tool action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Plugin id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// Plugin version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_version: Option<String>,
    /// sha256 of the plugin library.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Lifecycle state of the name as called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle_state: Option<String>,
    /// Deprecation or compatibility notice attached to the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<Value>,
    /// Policy decisions in pipeline order.
    #[serde(default)]
    pub policy: Vec<String>,
    /// Retries made.
    #[serde(default)]
    pub retries: u32,
    /// Handle of the full result, when it was truncated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_handle: Option<String>,
    /// The response as the caller got it.
    pub response: ToolResponse,
}

/// The transcript file name of a session: the id with anything but `[A-Za-z0-9._-]` replaced by
/// `_` (at most 100 characters), plus `.jsonl`.
pub fn transcript_file_name(session_id: &str) -> String {
    let mut s: String = session_id
        .chars()
        .take(100)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        s.insert_str(0, "session");
    }
    s.push_str(".jsonl");
    s
}

enum Message {
    Record(Box<TranscriptRecord>),
    Event(Box<TranscriptEvent>),
    Flush(mpsc::SyncSender<()>),
}

/// A line of a transcript that is not a call: a surface sent to the client, or a meta tool
/// call (`tool_search`, `list_tools`, served by the MCP layer, not the router). `replay` passes
/// over these; `stats` counts them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptEvent {
    /// [`TRANSCRIPT_FORMAT`].
    pub format: u32,
    /// `surface` or `meta_call`.
    pub event: String,
    /// Unix time in milliseconds.
    pub at_ms: u64,
    /// Session id.
    pub session_id: String,
    /// Client name.
    pub client: String,
    /// The meta tool called (`meta_call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Whether the meta tool call succeeded (`meta_call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// Typed tool schemas on the surface (`surface`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typed: Option<u64>,
    /// All tool schemas on the surface, meta tools included (`surface`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Bytes of the surface's serialized tools (`surface`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// A transcript line as readers see it.
#[derive(Debug, Clone)]
pub enum TranscriptLine {
    /// A call.
    Call(Box<TranscriptRecord>),
    /// A surface or meta tool event.
    Event(TranscriptEvent),
}

impl TranscriptLine {
    /// Parses one line: a call record, else an event.
    pub fn parse(line: &str) -> Result<TranscriptLine, serde_json::Error> {
        match serde_json::from_str::<TranscriptRecord>(line) {
            Ok(r) => Ok(TranscriptLine::Call(Box::new(r))),
            Err(e) => serde_json::from_str::<TranscriptEvent>(line).map(TranscriptLine::Event).map_err(|_| e),
        }
    }
}

/// The lines of a transcript file, for readers (`replay`, `stats`): every line, invalid UTF-8
/// replaced, except a last line without its newline that does not parse as a record (a write
/// cut short by a crash): that one is left out and the flag returned is true.
pub fn read_transcript_lines(path: &Path) -> std::io::Result<(Vec<String>, bool)> {
    let bytes = fs::read(path)?;
    let mut lines: Vec<String> = Vec::new();
    let mut cut = false;
    let mut rest: &[u8] = &bytes;
    while !rest.is_empty() {
        let (line, terminated, next) = match rest.iter().position(|b| *b == b'\n') {
            Some(i) => (&rest[..i], true, &rest[i + 1..]),
            None => (rest, false, &rest[rest.len()..]),
        };
        let text = String::from_utf8_lossy(line).into_owned();
        if !terminated && TranscriptLine::parse(&text).is_err() {
            cut = !text.trim().is_empty();
        } else {
            lines.push(text);
        }
        rest = next;
    }
    Ok((lines, cut))
}

/// Transcript files rotate at this size by default (`DIR/<session>.jsonl` becomes
/// `<session>.1.jsonl`, and so on).
pub const DEFAULT_TRANSCRIPT_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Rotated files kept per session by default; older ones are deleted.
pub const DEFAULT_TRANSCRIPT_KEEP: u32 = 4;

/// Appends records to `DIR/<session>.jsonl` from a background thread.
#[derive(Debug)]
pub struct TranscriptWriter {
    dir: PathBuf,
    tx: Option<mpsc::Sender<Message>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TranscriptWriter {
    /// Creates the folder if needed and starts the writer thread; files rotate at
    /// [`DEFAULT_TRANSCRIPT_MAX_BYTES`], keeping [`DEFAULT_TRANSCRIPT_KEEP`] old ones.
    pub fn open(dir: &Path) -> std::io::Result<TranscriptWriter> {
        TranscriptWriter::open_with(dir, DEFAULT_TRANSCRIPT_MAX_BYTES, DEFAULT_TRANSCRIPT_KEEP)
    }

    /// [`TranscriptWriter::open`] with another rotation size (a file is rotated before a line
    /// would take it past `max_bytes`; a single longer line still goes whole into a file of its
    /// own) and number of rotated files kept (`<session>.1.jsonl` is the newest).
    pub fn open_with(dir: &Path, max_bytes: u64, keep: u32) -> std::io::Result<TranscriptWriter> {
        fs::create_dir_all(dir)?;
        let (tx, rx) = mpsc::channel::<Message>();
        let dir_owned = dir.to_owned();
        let rotation = Rotation { max_bytes: max_bytes.max(1), keep };
        let thread = std::thread::Builder::new()
            .name("quiver-transcript".into())
            .spawn(move || run(&dir_owned, rotation, rx))?;
        Ok(TranscriptWriter { dir: dir.to_owned(), tx: Some(tx), thread: Some(thread) })
    }

    /// The file a session's records go to.
    pub fn path_for(&self, session_id: &str) -> PathBuf {
        self.dir.join(transcript_file_name(session_id))
    }

    /// Queues a record (never blocks on I/O).
    pub fn record(&self, record: TranscriptRecord) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Message::Record(Box::new(record)));
        }
    }

    /// Queues an event line (never blocks on I/O).
    pub fn event(&self, event: TranscriptEvent) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Message::Event(Box::new(event)));
        }
    }

    /// Waits until every record queued before this call is written and flushed.
    pub fn flush(&self) {
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        if let Some(tx) = &self.tx
            && tx.send(Message::Flush(ack_tx)).is_ok()
        {
            let _ = ack_rx.recv();
        }
    }
}

impl Drop for TranscriptWriter {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Rotation {
    max_bytes: u64,
    keep: u32,
}

/// `<stem>.<n>.jsonl` for `<stem>.jsonl`.
fn rotated_name(name: &str, n: u32) -> String {
    let stem = name.strip_suffix(".jsonl").unwrap_or(name);
    format!("{stem}.{n}.jsonl")
}

/// Moves `name` to `name.1`, `name.1` to `name.2`, ..., dropping what would go past `keep`.
fn rotate(dir: &Path, name: &str, keep: u32) {
    if keep == 0 {
        let _ = fs::remove_file(dir.join(name));
        return;
    }
    let _ = fs::remove_file(dir.join(rotated_name(name, keep)));
    for n in (1..keep).rev() {
        let _ = fs::rename(dir.join(rotated_name(name, n)), dir.join(rotated_name(name, n + 1)));
    }
    if let Err(e) = fs::rename(dir.join(name), dir.join(rotated_name(name, 1))) {
        tracing::warn!(file = %dir.join(name).display(), error = %e, "cannot rotate the transcript");
    }
}

type Open = HashMap<String, (BufWriter<fs::File>, u64)>;

fn run(dir: &Path, rotation: Rotation, rx: mpsc::Receiver<Message>) {
    let mut files: Open = HashMap::new();
    let open = |name: &str| -> std::io::Result<(BufWriter<fs::File>, u64)> {
        let f = fs::OpenOptions::new().create(true).append(true).open(dir.join(name))?;
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        Ok((BufWriter::new(f), size))
    };
    let write = |files: &mut Open, session_id: &str, line: serde_json::Result<String>| {
        let name = transcript_file_name(session_id);
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "transcript record not serializable");
                return;
            }
        };
        let needed = line.len() as u64 + 1;
        if let Some((f, size)) = files.get_mut(&name)
            && *size > 0
            && *size + needed > rotation.max_bytes
        {
            let _ = f.flush();
            files.remove(&name);
            rotate(dir, &name, rotation.keep);
        }
        if !files.contains_key(&name) {
            match open(&name) {
                Ok(mut entry) => {
                    if entry.1 > 0 && entry.1 + needed > rotation.max_bytes {
                        drop(entry);
                        rotate(dir, &name, rotation.keep);
                        match open(&name) {
                            Ok(e) => entry = e,
                            Err(e) => {
                                tracing::warn!(file = %dir.join(&name).display(), error = %e, "cannot open the transcript; dropping the record");
                                return;
                            }
                        }
                    }
                    files.insert(name.clone(), entry);
                }
                Err(e) => {
                    tracing::warn!(file = %dir.join(&name).display(), error = %e, "cannot open the transcript; dropping the record");
                    return;
                }
            }
        }
        let Some((f, size)) = files.get_mut(&name) else { return };
        match f.write_all(line.as_bytes()).and_then(|_| f.write_all(b"\n")) {
            Ok(()) => *size += needed,
            Err(e) => tracing::warn!(file = %name, error = %e, "cannot write the transcript"),
        }
    };
    let flush_all = |files: &mut Open| {
        for (f, _) in files.values_mut() {
            let _ = f.flush();
        }
    };
    while let Ok(first) = rx.recv() {
        let mut acks = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Message::Record(r) => write(&mut files, &r.session_id, serde_json::to_string(&r)),
                Message::Event(e) => write(&mut files, &e.session_id, serde_json::to_string(&e)),
                Message::Flush(ack) => acks.push(ack),
            }
            next = rx.try_recv().ok();
        }
        flush_all(&mut files);
        for a in acks {
            let _ = a.send(());
        }
    }
    flush_all(&mut files);
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_abi::{ToolError, ToolResponse};
    use serde_json::json;

    fn record(i: u64, session: &str, lane: Lane, response: ToolResponse) -> TranscriptRecord {
        TranscriptRecord {
            format: TRANSCRIPT_FORMAT,
            request_id: format!("r{i}"),
            started_at_ms: 1,
            duration_us: i * 1000,
            session_id: session.into(),
            client: "test".into(),
            lane,
            called_name: "echo".into(),
            arguments: json!({"text": "hi"}),
            confirmed: false,
            tool: Some("echo".into()),
            action: None,
            plugin: Some("p".into()),
            plugin_version: Some("1.0.0".into()),
            sha256: None,
            lifecycle_state: Some("active".into()),
            notice: None,
            policy: vec!["approval:not-required".into()],
            retries: 0,
            result_handle: None,
            response,
        }
    }

    #[test]
    fn transcripts_rotate_by_size_keeping_a_few_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let w = TranscriptWriter::open_with(dir.path(), 4096, 2).unwrap();
        for i in 1..=200 {
            w.record(record(i, "s1", Lane::Typed, ToolResponse::ok(json!({"text": "hi"}))));
        }
        w.flush();
        let path = w.path_for("s1");
        let one = dir.path().join("s1.1.jsonl");
        let two = dir.path().join("s1.2.jsonl");
        assert!(one.is_file() && two.is_file(), "{:?}", std::fs::read_dir(dir.path()).unwrap().collect::<Vec<_>>());
        assert!(!dir.path().join("s1.3.jsonl").exists(), "only two old files are kept");
        for p in [&path, &one, &two] {
            let text = std::fs::read_to_string(p).unwrap();
            assert!(text.len() <= 4096 + 1024, "{} is {} bytes", p.display(), text.len());
            assert!(text.lines().all(|l| serde_json::from_str::<TranscriptRecord>(l).is_ok()));
        }
        // The newest record is in the current file.
        let current = std::fs::read_to_string(&path).unwrap();
        assert!(current.lines().last().unwrap().contains("\"r200\""), "{current}");
    }

    #[test]
    fn file_names_are_sanitized() {
        assert_eq!(transcript_file_name("abc-1"), "abc-1.jsonl");
        assert_eq!(transcript_file_name("../etc/passwd"), "session.._etc_passwd.jsonl");
        assert_eq!(transcript_file_name(""), "session.jsonl");
    }

    #[test]
    fn writes_lines_and_stats_read_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let w = TranscriptWriter::open(dir.path()).unwrap();
        for i in 1..=20 {
            let lane = if i % 4 == 0 { Lane::Generic } else { Lane::Typed };
            let resp = if i % 5 == 0 {
                ToolResponse::error(ToolError::new("timeout", "slow"))
            } else {
                ToolResponse::ok(json!({"text": "hi"}))
            };
            w.record(record(i, "s1", lane, resp));
        }
        w.flush();
        let path = w.path_for("s1");
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"not json\n").unwrap();
        let stats = crate::stats_from_transcript(&path).unwrap();
        assert_eq!(stats.calls, 20);
        assert_eq!(stats.unreadable_lines, 1);
        assert_eq!(stats.status.error, 4);
        assert_eq!(stats.errors["timeout"], 4);
        assert_eq!(stats.tools["echo"].timeouts, 4);
        assert_eq!(stats.duration_ms.p50, 10.0);
        assert_eq!(stats.duration_ms.p95, 19.0);
        assert_eq!(stats.lanes["generic"].calls, 5);
        // Generic calls are 4, 8, 12, 16, 20; of them 20 failed.
        assert_eq!(stats.lanes["generic"].success_rate, 0.8);
        assert_eq!(stats.generic.run_calls, 5);
    }
}
