//! The worker process side (`quiver worker`): receives one verified library over its stdin,
//! enters its sandbox, loads the library and serves calls until its stdin closes.
//!
//! Order (each step before the next): take the protocol pipes off stdin/stdout (so a plugin that
//! prints cannot corrupt the protocol: stdout then goes to stderr) → read [`Hello`] → check the
//! bytes against the host's sha256 → stage them in a sealed memory file → enter the sandbox →
//! `dlopen` (the plugin's constructors run here, already sandboxed) → [`Ready`] → serve.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quiver_catalog::{BackendFuture, CallSink, HostServices, LogLevel, Question, ToolBackend};

use super::protocol::{self, Hello, PROTOCOL_VERSION, Ready, ToHost, ToWorker};
use crate::host_services::InProcessBackend;

/// Where frames to the host go; shared by every call.
struct Out {
    w: Mutex<(BufWriter<File>, Vec<u8>)>,
}

impl Out {
    fn send(&self, msg: &ToHost) {
        let mut g = self.w.lock().unwrap_or_else(|e| e.into_inner());
        let (w, buf) = &mut *g;
        if let Err(e) = protocol::write_frame(w, msg, buf) {
            // The host is gone: nobody is waiting for anything.
            if e.kind() == std::io::ErrorKind::InvalidData {
                drop(g);
                if let ToHost::Done { id, .. } = msg {
                    let err = quiver_abi::ToolResponse::error(quiver_abi::ToolError::new(
                        quiver_abi::ErrorCode::PROTOCOL,
                        format!("the tool's result is too large to send back ({e})"),
                    ));
                    self.send(&ToHost::Done { id: *id, response: serde_json::to_string(&err).unwrap_or_default() });
                }
                return;
            }
            std::process::exit(0);
        }
    }
}

/// One running call, as the plugin's host services see it.
struct ChildCall {
    id: u64,
    cancelled: AtomicBool,
    deadline: Instant,
    out: Arc<Out>,
    next_seq: AtomicU64,
    answers: Mutex<HashMap<u64, mpsc::Sender<Result<String, String>>>>,
}

impl ChildCall {
    /// Passes a question to the host and waits for its answer (JSON text) until the deadline.
    fn ask_host(&self, question: Question, request: &str) -> Result<String, String> {
        let kind = question.as_str();
        if HostServices::is_cancelled(self) {
            return Err(format!("{kind} refused: the call is cancelled or past its deadline"));
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.answers.lock().unwrap_or_else(|e| e.into_inner()).insert(seq, tx);
        let (id, request) = (self.id, request.to_owned());
        self.out.send(&match question {
            Question::Elicitation => ToHost::Elicit { id, seq, request },
            Question::Sampling => ToHost::Sample { id, seq, request },
        });
        let wait = self.deadline.saturating_duration_since(Instant::now());
        let answer =
            rx.recv_timeout(wait).unwrap_or_else(|_| Err(format!("{kind} abandoned: the call's deadline passed")));
        self.answers.lock().unwrap_or_else(|e| e.into_inner()).remove(&seq);
        answer
    }
}

/// The worker's side of the host services: everything goes to the host over the pipe, which
/// decides (the client's capabilities are known there), so both questions are always passed on.
impl HostServices for ChildCall {
    fn log(&self, level: LogLevel, message: &str) {
        self.out.send(&ToHost::Log { id: self.id, level: level as u8, message: message.to_owned() });
    }
    fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        self.out.send(&ToHost::Progress { id: self.id, progress, total, message: message.to_owned() });
    }
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire) || Instant::now() >= self.deadline
    }
    fn can_elicit(&self) -> bool {
        true
    }
    fn elicit(&self, request: serde_json::Value) -> BackendFuture<Result<serde_json::Value, String>> {
        Box::pin(std::future::ready(self.ask_host(Question::Elicitation, &request.to_string()).and_then(parse_answer)))
    }
    fn can_sample(&self) -> bool {
        true
    }
    fn sample(&self, request: serde_json::Value) -> BackendFuture<Result<serde_json::Value, String>> {
        Box::pin(std::future::ready(self.ask_host(Question::Sampling, &request.to_string()).and_then(parse_answer)))
    }
}

fn parse_answer(text: String) -> Result<serde_json::Value, String> {
    serde_json::from_str(&text).map_err(|e| format!("the host's answer is not JSON: {e}"))
}

impl CallSink for ChildCall {
    fn services(&self) -> &dyn HostServices {
        self
    }
    fn ask(&self, question: Question, request: &str) -> Result<String, String> {
        self.ask_host(question, request)
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Threads for calls that may block; grows when every thread is busy.
struct Pool {
    tx: mpsc::Sender<Job>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    idle: Arc<AtomicUsize>,
}

impl Pool {
    fn new() -> Pool {
        let (tx, rx) = mpsc::channel();
        Pool { tx, rx: Arc::new(Mutex::new(rx)), idle: Arc::new(AtomicUsize::new(0)) }
    }

    fn run(&self, job: Job) {
        if self.idle.load(Ordering::Acquire) == 0 {
            let rx = self.rx.clone();
            let idle = self.idle.clone();
            let spawned = std::thread::Builder::new().name("quiver-worker-call".into()).spawn(move || {
                loop {
                    idle.fetch_add(1, Ordering::AcqRel);
                    let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    idle.fetch_sub(1, Ordering::AcqRel);
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
            });
            if spawned.is_err() {
                eprintln!("quiver worker: cannot start a call thread");
            }
        }
        let _ = self.tx.send(job);
    }
}

fn fail(out: &mut BufWriter<File>, message: String) -> std::process::ExitCode {
    let mut buf = Vec::new();
    let _ = protocol::write_frame(out, &ToHost::LoadFailed { message: message.clone() }, &mut buf);
    eprintln!("quiver worker: {message}");
    std::process::ExitCode::FAILURE
}

/// Takes fds 0 and 1 for the protocol and points the standard streams elsewhere: stdin at
/// `/dev/null`, stdout at stderr.
fn take_protocol_pipes() -> std::io::Result<(File, File)> {
    // SAFETY: dup/dup2/open on the process's own standard descriptors.
    unsafe {
        let proto_in = libc::dup(0);
        let proto_out = libc::dup(1);
        if proto_in < 0 || proto_out < 0 {
            return Err(std::io::Error::last_os_error());
        }
        for fd in [proto_in, proto_out] {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::close(null);
        }
        libc::dup2(2, 1);
        Ok((File::from_raw_fd(proto_in), File::from_raw_fd(proto_out)))
    }
}

/// The worker's main: returns when the host closes the pipe.
pub fn run() -> std::process::ExitCode {
    let (input, output) = match take_protocol_pipes() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("quiver worker: cannot set up the protocol pipes: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let mut out = BufWriter::with_capacity(64 * 1024, output);
    let mut buf = Vec::new();
    let hello: Hello = match protocol::read_frame::<ToWorker>(&mut input, &mut buf) {
        Ok(Some(ToWorker::Hello(h))) => h,
        Ok(Some(ToWorker::HelloAdapter(h))) => return run_adapter(input, out, h),
        Ok(_) => return fail(&mut out, "the host did not start with a handshake".into()),
        Err(e) => return fail(&mut out, format!("cannot read the handshake: {e}")),
    };
    drop(buf);
    if hello.protocol != PROTOCOL_VERSION {
        return fail(
            &mut out,
            format!("the host speaks worker protocol v{}, this worker v{PROTOCOL_VERSION}", hello.protocol),
        );
    }
    let sha256 = quiver_manifest::sha256_hex(&hello.library);
    if sha256 != hello.sha256 {
        return fail(&mut out, format!("received library has sha256 {sha256}, the host verified {}", hello.sha256));
    }
    let staged = match crate::library::stage_library(&hello.library, &hello.plugin, None) {
        Ok(p) => p,
        Err(e) => return fail(&mut out, format!("cannot stage the library in memory: {e}")),
    };
    drop(hello.library);
    // Before any plugin code runs, and before any other thread exists.
    let sandbox = super::sandbox::enter(&hello.sandbox);
    let opened = match crate::library::open_plugin(&staged) {
        Ok(o) => o,
        Err((stage, m)) => return fail(&mut out, format!("{} check failed: {m}", stage.as_str())),
    };
    let mut buf = Vec::new();
    let ready = ToHost::Ready(Ready { protocol: PROTOCOL_VERSION, sha256, plugin_info: opened.info_text, sandbox });
    if protocol::write_frame(&mut out, &ready, &mut buf).is_err() {
        return std::process::ExitCode::SUCCESS;
    }
    serve(input, out, Arc::new(InProcessBackend::new(opened.module, Vec::new())));
    std::process::ExitCode::SUCCESS
}

/// Serves an adapter bundle: checks the manifest bytes against the host's sha256, validates
/// them again, enters the sandbox, and only then sets up the adapter (its HTTP client starts
/// threads, which must be confined) and serves calls.
fn run_adapter(
    input: BufReader<File>,
    mut out: BufWriter<File>,
    hello: super::protocol::HelloAdapter,
) -> std::process::ExitCode {
    if hello.protocol != PROTOCOL_VERSION {
        return fail(
            &mut out,
            format!("the host speaks worker protocol v{}, this worker v{PROTOCOL_VERSION}", hello.protocol),
        );
    }
    let sha256 = quiver_manifest::sha256_hex(hello.manifest.as_bytes());
    if sha256 != hello.sha256 {
        return fail(&mut out, format!("received manifest has sha256 {sha256}, the host verified {}", hello.sha256));
    }
    let manifest = match quiver_manifest::Manifest::from_yaml(&hello.manifest, &hello.plugin) {
        Ok(m) => m,
        Err(e) => return fail(&mut out, format!("manifest check failed: {e}")),
    };
    // Before any thread exists and before anything of the adapter runs.
    let sandbox = super::sandbox::enter(&hello.sandbox);
    let placement = quiver_catalog::Placement { isolation: "process", detail: sandbox.clone() };
    let adapter = match crate::adapter::Adapter::new(&manifest, hello.resolved, placement) {
        Ok(a) => a,
        Err(e) => return fail(&mut out, format!("adapter setup failed: {e}")),
    };
    let mut buf = Vec::new();
    let ready = ToHost::Ready(Ready { protocol: PROTOCOL_VERSION, sha256, plugin_info: String::new(), sandbox });
    if protocol::write_frame(&mut out, &ready, &mut buf).is_err() {
        return std::process::ExitCode::SUCCESS;
    }
    serve(input, out, Arc::new(adapter));
    std::process::ExitCode::SUCCESS
}

fn serve(mut input: BufReader<File>, out: BufWriter<File>, backend: Arc<dyn ToolBackend>) {
    let out = Arc::new(Out { w: Mutex::new((out, Vec::with_capacity(4096))) });
    let calls: Arc<Mutex<HashMap<u64, Arc<ChildCall>>>> = Arc::default();
    let pool = Pool::new();
    let mut buf = Vec::with_capacity(4096);
    loop {
        let msg = match protocol::read_frame::<ToWorker>(&mut input, &mut buf) {
            Ok(Some(m)) => m,
            // The host closed the pipe (shut down, swapped the plugin, or died): nobody waits.
            Ok(None) => return,
            Err(e) => {
                eprintln!("quiver worker: unreadable frame from the host ({e}); exiting");
                return;
            }
        };
        match msg {
            ToWorker::Call { id, tool, request, timeout_ms, inline } => {
                let call = Arc::new(ChildCall {
                    id,
                    cancelled: AtomicBool::new(false),
                    deadline: Instant::now() + Duration::from_millis(timeout_ms),
                    out: out.clone(),
                    next_seq: AtomicU64::new(0),
                    answers: Mutex::new(HashMap::new()),
                });
                calls.lock().unwrap_or_else(|e| e.into_inner()).insert(id, call.clone());
                let job = {
                    let backend = backend.clone();
                    let calls = calls.clone();
                    move || {
                        let response = backend.invoke(&tool, &request, call.clone());
                        calls.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                        call.out.send(&ToHost::Done { id, response });
                    }
                };
                if inline { job() } else { pool.run(Box::new(job)) }
            }
            ToWorker::Cancel { id } => {
                if let Some(c) = calls.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
                    c.cancelled.store(true, Ordering::Release);
                }
            }
            ToWorker::Answer { id, seq, result } => {
                let call = calls.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned();
                if let Some(c) = call
                    && let Some(tx) = c.answers.lock().unwrap_or_else(|e| e.into_inner()).remove(&seq)
                {
                    let _ = tx.send(result);
                }
            }
            ToWorker::Hello(_) | ToWorker::HelloAdapter(_) => {
                eprintln!("quiver worker: a second handshake; exiting");
                return;
            }
        }
    }
}
