//! The host side of a worker: [`WorkerBackend`] starts the worker process, forwards calls and
//! host services over its pipes, notices crashes, restarts it with backoff and gives up after
//! repeated crashes.

use std::collections::{HashMap, VecDeque};
use std::io::{BufReader, BufWriter};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::{Duration, Instant};

use quiver_abi::{ErrorCode, ToolError};
use quiver_catalog::{AbortReason, CallSink, Dispatch, LogLevel, Placement, RemoteCall, ToolBackend};
use tokio::sync::{Notify, oneshot};

use super::protocol::{self, HelloRef, PROTOCOL_VERSION, Ready, SandboxRules, ToHost, ToWorker};
use crate::library::VerifiedLibrary;

/// The library bytes a worker is sent: verified bytes kept in their sealed memory file (not
/// copied: a restart sends them again from there). A worker listed before its library was read
/// ([`WorkerBackend::start_deferred`] with a `read`) starts with none: its `read` checks the
/// library against the signed sha256 and only those bytes are set, once; a worker is never
/// started without them.
#[derive(Debug, Clone, Default)]
pub struct WorkerLibrary(Arc<std::sync::OnceLock<VerifiedLibrary>>);

impl WorkerLibrary {
    /// Bytes verified already.
    pub fn verified(library: VerifiedLibrary) -> WorkerLibrary {
        let slot = std::sync::OnceLock::new();
        let _ = slot.set(library);
        WorkerLibrary(Arc::new(slot))
    }

    fn get(&self) -> Option<&VerifiedLibrary> {
        self.0.get()
    }
}

/// What a worker's handshake loads.
enum Load<'a> {
    Library(&'a VerifiedLibrary),
    Adapter(&'a AdapterLoad),
}

/// Reads and checks a worker's library on its first start (see [`WorkerLibrary`]); a refusal
/// names its stage.
pub type LibraryRead = Box<dyn FnOnce() -> Result<VerifiedLibrary, crate::BundleError> + Send>;

/// Writes the handshake frame without building it in memory first: the frame of the hello
/// with an empty library, with the library's bytes streamed in where that empty slice's length
/// byte was (postcard writes a byte slice as its varint length, then the bytes; the sandbox
/// rules are the only field after it).
fn write_hello(w: &mut impl std::io::Write, spec: &WorkerSpec, library: &VerifiedLibrary) -> std::io::Result<()> {
    let empty = HelloRef::Hello {
        protocol: PROTOCOL_VERSION,
        plugin: &spec.plugin,
        sha256: &spec.sha256,
        library: &[],
        sandbox: &spec.sandbox,
    };
    let frame = postcard::to_allocvec(&empty).map_err(std::io::Error::other)?;
    let tail = postcard::experimental::serialized_size(&spec.sandbox).map_err(std::io::Error::other)?;
    let split = frame.len() - tail - 1;
    debug_assert_eq!(frame[split], 0, "the empty library's length byte");
    let n = library.len() as usize;
    let length = postcard::to_allocvec(&n).map_err(std::io::Error::other)?;
    let total = frame.len() - 1 + length.len() + n;
    let total = u32::try_from(total)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "the library is too large to send"))?;
    w.write_all(&total.to_le_bytes())?;
    w.write_all(&frame[..split])?;
    w.write_all(&length)?;
    library.write_to(w)?;
    w.write_all(&frame[split + 1..])?;
    w.flush()
}

/// Error code of a call whose worker died under it.
pub const PLUGIN_CRASHED: &str = ErrorCode::PLUGIN_CRASHED;
/// Error code of a call to a plugin whose worker is disabled after repeated crashes.
pub const PLUGIN_UNAVAILABLE: &str = ErrorCode::PLUGIN_UNAVAILABLE;

/// How worker processes are started and limited.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// The executable (the `quiver` binary).
    pub program: PathBuf,
    /// Its arguments (`["worker"]`).
    pub args: Vec<String>,
    /// `RLIMIT_AS` in bytes; 0: none.
    pub max_memory_bytes: u64,
    /// `RLIMIT_CPU` in seconds; 0: none.
    pub max_cpu_seconds: u64,
    /// Time a worker has to stop a call past its deadline before it is killed.
    pub kill_grace: Duration,
    /// Crashes within `crash_window` after which the worker is not restarted.
    pub max_crashes: u32,
    /// See `max_crashes`.
    pub crash_window: Duration,
    /// The worker's whole environment.
    pub env: Vec<(String, String)>,
    /// How long a worker may take to load its plugin.
    pub start_timeout: Duration,
}

impl WorkerSettings {
    /// Workers run `program worker`, with the defaults of `quiver.yaml`'s `isolation.worker`.
    pub fn new(program: PathBuf) -> WorkerSettings {
        WorkerSettings {
            program,
            args: vec!["worker".to_owned()],
            max_memory_bytes: 4096 << 20,
            max_cpu_seconds: 0,
            kill_grace: Duration::from_millis(200),
            max_crashes: 5,
            crash_window: Duration::from_secs(60),
            env: vec![("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())],
            start_timeout: Duration::from_secs(20),
        }
    }
}

/// What one worker serves.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// Plugin id.
    pub plugin: String,
    /// The verified library bytes (see [`WorkerLibrary`]).
    pub library: WorkerLibrary,
    /// Their sha256.
    pub sha256: String,
    /// The sandbox.
    pub sandbox: SandboxRules,
    /// Tools whose calls run on the worker's reader thread (they answer within microseconds).
    pub inline: Vec<String>,
    /// For an adapter bundle (then `library` is empty and `sha256` is the manifest's): the
    /// verified manifest text and what the host resolved for it.
    pub adapter: Option<AdapterLoad>,
}

/// What a worker needs to serve an adapter bundle.
#[derive(Debug, Clone)]
pub struct AdapterLoad {
    /// The signed manifest text, exactly as verified.
    pub manifest: String,
    /// See [`crate::adapter::Resolved`].
    pub resolved: crate::adapter::Resolved,
}

type Answer = Result<String, ToolError>;

struct Pending {
    tx: oneshot::Sender<Answer>,
    sink: Arc<dyn CallSink>,
    tool: String,
}

/// What a live process and its reader thread share.
struct ProcShared {
    pid: u32,
    pending: Mutex<HashMap<u64, Pending>>,
    alive: AtomicBool,
    /// A call overran its deadline and the worker may be killed: no new calls go to it.
    draining: AtomicBool,
    /// Set when the host ends the process on purpose (swap, shutdown): no restart.
    retired: AtomicBool,
    /// Why the host killed it (a call overran its deadline).
    killed_for: Mutex<Option<String>>,
    child: Mutex<Option<Child>>,
}

impl ProcShared {
    fn kill(&self, reason: String) {
        let mut k = self.killed_for.lock().unwrap_or_else(|e| e.into_inner());
        if k.is_none() {
            *k = Some(reason);
        }
        drop(k);
        // SAFETY: kill(2) on the pid of our own child, which is not reaped before the reader
        // thread sees the pipe close (so the pid cannot have been reused).
        if self.alive.load(Ordering::Acquire) {
            unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// One running worker process.
struct Proc {
    shared: Arc<ProcShared>,
    writer: Mutex<(BufWriter<std::process::ChildStdin>, Vec<u8>)>,
    next_id: AtomicU64,
    /// What the worker's sandbox enforces (from its handshake).
    sandbox: std::sync::OnceLock<String>,
}

impl Proc {
    fn send(&self, msg: &ToWorker) -> std::io::Result<()> {
        let mut g = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let (w, buf) = &mut *g;
        protocol::write_frame(w, msg, buf)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Closing stdin (dropping the writer) ends the worker; the reader thread reaps it.
        self.shared.retired.store(true, Ordering::Release);
    }
}

#[derive(Default)]
struct SupState {
    current: Option<Arc<Proc>>,
    crashes: VecDeque<Instant>,
    /// Set after `max_crashes`: the reason calls are refused.
    disabled: Option<String>,
    last_exit: Option<String>,
    /// The first worker is still starting ([`WorkerBackend::start_deferred`]).
    starting: bool,
}

struct Supervisor {
    spec: WorkerSpec,
    settings: WorkerSettings,
    state: Mutex<SupState>,
    changed: Notify,
    /// Set (and signalled) when a call waits for a deferred start: the start begins at once.
    kick: (Mutex<bool>, std::sync::Condvar),
}

/// Calls of one plugin, run in a worker process of its own.
pub struct WorkerBackend {
    sup: Arc<Supervisor>,
}

impl std::fmt::Debug for WorkerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBackend").field("plugin", &self.sup.spec.plugin).finish_non_exhaustive()
    }
}

impl Drop for WorkerBackend {
    fn drop(&mut self) {
        // In-flight calls hold the process themselves; dropping it here ends an idle worker now.
        let mut st = self.sup.state.lock().unwrap_or_else(|e| e.into_inner());
        st.current = None;
        st.disabled = Some("the plugin was unloaded".to_owned());
        drop(st);
        self.sup.changed.notify_waiters();
    }
}

fn describe_exit(status: Option<std::process::ExitStatus>) -> (String, Option<i32>, Option<i32>) {
    match status {
        Some(s) => match (s.signal(), s.code()) {
            (Some(sig), _) => (format!("killed by signal {sig} ({})", signal_name(sig)), Some(sig), None),
            (None, Some(code)) => (format!("exited with status {code}"), None, Some(code)),
            _ => ("ended".to_owned(), None, None),
        },
        None => ("ended (status unknown)".to_owned(), None, None),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        _ => "signal",
    }
}

impl Supervisor {
    fn new(spec: WorkerSpec, settings: WorkerSettings, state: SupState) -> Supervisor {
        Supervisor {
            spec,
            settings,
            state: Mutex::new(state),
            changed: Notify::new(),
            kick: (Mutex::new(false), std::sync::Condvar::new()),
        }
    }

    /// A call is waiting: a deferred start waits no longer.
    fn kick(&self) {
        *self.kick.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.kick.1.notify_all();
    }

    /// Starts a worker and completes the handshake. Blocking.
    fn spawn(self: &Arc<Self>) -> Result<(Arc<Proc>, Ready), String> {
        let s = &self.settings;
        // What the handshake sends: an adapter's definition, or the verified library (a worker
        // is never started without it).
        let load = match (&self.spec.adapter, self.spec.library.get()) {
            (Some(a), _) => Load::Adapter(a),
            (None, Some(l)) => Load::Library(l),
            (None, None) => return Err("the plugin's library was not read and verified".to_owned()),
        };
        let mut cmd = Command::new(&s.program);
        cmd.args(&s.args)
            .env_clear()
            .envs(s.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let (mem, cpu) = (s.max_memory_bytes, s.max_cpu_seconds);
        // SAFETY: only async-signal-safe calls (setrlimit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let set = |res, v: u64| {
                    let lim = libc::rlimit { rlim_cur: v as libc::rlim_t, rlim_max: v as libc::rlim_t };
                    libc::setrlimit(res, &lim)
                };
                set(libc::RLIMIT_CORE, 0);
                if mem > 0 {
                    set(libc::RLIMIT_AS, mem);
                }
                if cpu > 0 {
                    set(libc::RLIMIT_CPU, cpu);
                }
                Ok(())
            });
        }
        let mut child =
            cmd.spawn().map_err(|e| format!("cannot start the worker process {} ({e})", s.program.display()))?;
        let pid = child.id();
        let stdin = child.stdin.take().ok_or("the worker has no stdin")?;
        let stdout = child.stdout.take().ok_or("the worker has no stdout")?;
        let shared = Arc::new(ProcShared {
            pid,
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
            draining: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            killed_for: Mutex::new(None),
            child: Mutex::new(Some(child)),
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        {
            let shared = shared.clone();
            let sup = Arc::downgrade(self);
            std::thread::Builder::new()
                .name(format!("quiver-worker-{}", self.spec.plugin))
                .spawn(move || read_loop(BufReader::with_capacity(64 * 1024, stdout), shared, sup, ready_tx))
                .map_err(|e| format!("cannot start the worker's reader thread: {e}"))?;
        }
        let proc = Arc::new(Proc {
            shared: shared.clone(),
            writer: Mutex::new((BufWriter::with_capacity(64 * 1024, stdin), Vec::new())),
            next_id: AtomicU64::new(1),
            sandbox: std::sync::OnceLock::new(),
        });
        let sent = {
            let mut g = proc.writer.lock().unwrap_or_else(|e| e.into_inner());
            let (w, _) = &mut *g;
            match load {
                // Written straight to the pipe (no frame buffer the size of the library).
                Load::Library(library) => write_hello(w, &self.spec, library),
                Load::Adapter(a) => {
                    let hello = ToWorker::HelloAdapter(protocol::HelloAdapter {
                        protocol: PROTOCOL_VERSION,
                        plugin: self.spec.plugin.clone(),
                        sha256: self.spec.sha256.clone(),
                        manifest: a.manifest.clone(),
                        resolved: a.resolved.clone(),
                        sandbox: self.spec.sandbox.clone(),
                    });
                    protocol::write_frame(w, &hello, &mut Vec::new())
                }
            }
        };
        let ready = match ready_rx.recv_timeout(s.start_timeout) {
            Ok(Ok(r)) => r,
            Ok(Err(m)) => {
                shared.kill("failed to start".into());
                return Err(m);
            }
            Err(_) => {
                shared.kill("did not answer the handshake".into());
                return Err(match sent {
                    Err(e) => format!("the worker closed its pipe during the handshake ({e})"),
                    Ok(()) => format!("the worker did not load the plugin within {:?}", s.start_timeout),
                });
            }
        };
        if ready.protocol != PROTOCOL_VERSION || ready.sha256 != self.spec.sha256 {
            shared.kill("bad handshake".into());
            return Err(format!(
                "the worker answered protocol v{} for sha256 {}, expected v{PROTOCOL_VERSION} for {}",
                ready.protocol, ready.sha256, self.spec.sha256
            ));
        }
        let _ = proc.sandbox.set(ready.sandbox.clone());
        Ok((proc, ready))
    }

    /// The live worker, waiting (until `deadline`) for a restart in progress.
    async fn live(self: &Arc<Self>, deadline: Instant) -> Result<Arc<Proc>, ToolError> {
        loop {
            let notified = self.changed.notified();
            let starting = {
                let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(p) = &st.current
                    && p.shared.alive.load(Ordering::Acquire)
                    && !p.shared.draining.load(Ordering::Acquire)
                {
                    return Ok(p.clone());
                }
                if let Some(why) = &st.disabled {
                    return Err(ToolError::new(
                        PLUGIN_UNAVAILABLE,
                        format!("plugin `{}` is unavailable: {why}. Use another tool, or tell the operator (`quiver list` shows its state).", self.spec.plugin),
                    )
                    .with_details(serde_json::json!({ "plugin": self.spec.plugin })));
                }
                st.starting
            };
            if starting {
                self.kick();
            }
            if tokio::time::timeout_at(deadline.into(), notified).await.is_err() {
                if starting {
                    return Err(ToolError::new(
                        PLUGIN_UNAVAILABLE,
                        format!("plugin `{}`'s worker process is still starting and was not ready before the call's deadline; try again shortly", self.spec.plugin),
                    )
                    .retryable());
                }
                return Err(ToolError::new(
                    PLUGIN_UNAVAILABLE,
                    format!("plugin `{}` is restarting after a crash and was not back before the call's deadline; try again shortly", self.spec.plugin),
                )
                .retryable());
            }
        }
    }

    /// The reader saw the worker end. Decides whether and when to restart it.
    fn on_exit(self: &Arc<Self>, shared: &ProcShared, what: String) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let is_current = st.current.as_ref().is_some_and(|p| std::ptr::eq(Arc::as_ptr(&p.shared), shared));
        if !is_current || shared.retired.load(Ordering::Acquire) || st.disabled.is_some() {
            return;
        }
        st.current = None;
        st.last_exit = Some(what.clone());
        let now = Instant::now();
        st.crashes.push_back(now);
        while st.crashes.front().is_some_and(|t| now.duration_since(*t) > self.settings.crash_window) {
            st.crashes.pop_front();
        }
        let n = st.crashes.len() as u32;
        if n >= self.settings.max_crashes {
            let why = format!(
                "its worker crashed {n} times within {} s (last: {what}); it stays disabled until its bundle changes or the host restarts",
                self.settings.crash_window.as_secs()
            );
            tracing::error!(plugin = %self.spec.plugin, "{why}");
            st.disabled = Some(why);
            drop(st);
            self.changed.notify_waiters();
            return;
        }
        drop(st);
        let backoff = Duration::from_millis(50u64 << (n.saturating_sub(1)).min(7)).min(Duration::from_secs(5));
        tracing::warn!(plugin = %self.spec.plugin, exit = %what, backoff_ms = backoff.as_millis() as u64, "plugin worker ended; restarting");
        let sup = Arc::downgrade(self);
        let _ = std::thread::Builder::new().name("quiver-worker-restart".into()).spawn(move || {
            std::thread::sleep(backoff);
            let Some(sup) = sup.upgrade() else { return };
            sup.restart();
        });
    }

    fn restart(self: &Arc<Self>) {
        if self.state.lock().unwrap_or_else(|e| e.into_inner()).disabled.is_some() {
            return;
        }
        match self.spawn() {
            Ok((proc, _)) => {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.disabled.is_none() {
                    st.current = Some(proc);
                }
                drop(st);
                tracing::info!(plugin = %self.spec.plugin, "plugin worker restarted");
            }
            Err(e) => {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.disabled = Some(format!("its worker could not be restarted: {e}"));
                drop(st);
                tracing::error!(plugin = %self.spec.plugin, error = %e, "plugin worker could not be restarted");
            }
        }
        self.changed.notify_waiters();
    }
}

/// Reads the worker's frames until its stdout closes, then reaps it and fails its pending calls.
fn read_loop(
    mut input: BufReader<std::process::ChildStdout>,
    shared: Arc<ProcShared>,
    sup: Weak<Supervisor>,
    ready: mpsc::Sender<Result<Ready, String>>,
) {
    let mut buf = Vec::with_capacity(4096);
    let mut handshake = Some(ready);
    let protocol_error = loop {
        let msg = match protocol::read_frame::<ToHost>(&mut input, &mut buf) {
            Ok(Some(m)) => m,
            Ok(None) => break None,
            Err(e) => break Some(format!("sent an unreadable frame ({e})")),
        };
        match msg {
            ToHost::Ready(r) => match handshake.take() {
                Some(tx) => {
                    let _ = tx.send(Ok(r));
                }
                None => break Some("sent a second handshake".to_owned()),
            },
            ToHost::LoadFailed { message } => {
                if let Some(tx) = handshake.take() {
                    let _ = tx.send(Err(message));
                }
            }
            ToHost::Done { id, response } => {
                let p = shared.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                if let Some(p) = p {
                    let _ = p.tx.send(Ok(response));
                }
            }
            ToHost::Log { id, level, message } => {
                if let Some(sink) = sink_of(&shared, id) {
                    sink.log(LogLevel::from_u8(level), &message);
                }
            }
            ToHost::Progress { id, progress, total, message } => {
                if let Some(sink) = sink_of(&shared, id) {
                    sink.progress(progress, total, &message);
                }
            }
            ToHost::Elicit { id, seq, request } => ask(&shared, &sup, id, seq, request, true),
            ToHost::Sample { id, seq, request } => ask(&shared, &sup, id, seq, request, false),
        }
    };
    if let Some(e) = &protocol_error {
        shared.kill(format!("the worker {e}"));
    }
    // The pipe closed: the process is ending. Reap it and say why.
    let status = shared.child.lock().unwrap_or_else(|e| e.into_inner()).take().and_then(|mut c| c.wait().ok());
    shared.alive.store(false, Ordering::Release);
    let (exit, signal, code) = describe_exit(status);
    let killed_for = shared.killed_for.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let what = match &killed_for {
        Some(reason) => format!("{exit}: {reason}"),
        None => exit.clone(),
    };
    if let Some(tx) = handshake.take() {
        let _ = tx.send(Err(format!("the worker {what} before it finished loading the plugin")));
    }
    let pending: Vec<(u64, Pending)> = shared.pending.lock().unwrap_or_else(|e| e.into_inner()).drain().collect();
    let plugin = sup.upgrade().map(|s| s.spec.plugin.clone()).unwrap_or_default();
    for (_, p) in pending {
        let mut err = ToolError::new(
            PLUGIN_CRASHED,
            format!(
                "plugin `{plugin}` crashed while running `{}` (its worker process {what}); the host and other tools are unaffected and the plugin is being restarted. Retry only if the call is safe to repeat.",
                p.tool
            ),
        )
        .with_details(serde_json::json!({ "plugin": plugin, "signal": signal, "exit_code": code, "reason": killed_for }));
        if killed_for.is_some() {
            // Collateral of another call's overrun: this call did nothing wrong.
            err = err.retryable();
        }
        let _ = p.tx.send(Err(err));
    }
    if let Some(sup) = sup.upgrade() {
        sup.on_exit(&shared, what);
    }
}

fn sink_of(shared: &ProcShared, id: u64) -> Option<Arc<dyn CallSink>> {
    shared.pending.lock().unwrap_or_else(|e| e.into_inner()).get(&id).map(|p| p.sink.clone())
}

/// Asks the client on the plugin's behalf, on a thread of its own (the client may take long);
/// the answer goes back to the worker.
fn ask(shared: &Arc<ProcShared>, sup: &Weak<Supervisor>, id: u64, seq: u64, request: String, elicit: bool) {
    let Some(sink) = sink_of(shared, id) else { return };
    let Some(proc) = sup.upgrade().and_then(|s| {
        let st = s.state.lock().unwrap_or_else(|e| e.into_inner());
        st.current.clone().filter(|p| Arc::ptr_eq(&p.shared, shared))
    }) else {
        return;
    };
    let _ = std::thread::Builder::new().name("quiver-worker-ask".into()).spawn(move || {
        let result = if elicit { sink.elicit(&request) } else { sink.sample(&request) };
        let _ = proc.send(&ToWorker::Answer { id, seq, result });
    });
}

impl WorkerBackend {
    /// Starts the worker for `spec` and waits for it to load the plugin; returns the backend and
    /// the plugin's `PluginInfo` JSON as the worker reported it.
    pub fn start(spec: WorkerSpec, settings: WorkerSettings) -> Result<(WorkerBackend, Ready), String> {
        let sup = Arc::new(Supervisor::new(spec, settings, SupState::default()));
        let (proc, ready) = sup.spawn()?;
        sup.state.lock().unwrap_or_else(|e| e.into_inner()).current = Some(proc);
        Ok((WorkerBackend { sup }, ready))
    }

    /// Starts the worker for `spec` on a thread of its own and returns at once. The process is
    /// started at the first call or after `linger`, whichever comes first (so a host answering
    /// its client's handshake does not share the CPU with the worker's start). Calls wait
    /// (within their deadline) until the worker has loaded the plugin and `check` accepted its
    /// handshake; if the start or the check fails, calls get `plugin_unavailable` with the
    /// reason and `failed` is called with it (once, on that thread). With `read`, the spec's
    /// library is empty and `read` reads and checks it on that thread before the process starts
    /// (a failed read fails the start, and `failed` gets the stage it failed at; `None` for a
    /// worker that failed to start or its check).
    pub fn start_deferred(
        spec: WorkerSpec,
        settings: WorkerSettings,
        linger: Duration,
        read: Option<LibraryRead>,
        check: impl FnOnce(&Ready) -> Result<(), String> + Send + 'static,
        failed: impl FnOnce(Option<crate::Stage>, String) + Send + 'static,
    ) -> Result<WorkerBackend, String> {
        let state = SupState { starting: true, ..SupState::default() };
        let sup = Arc::new(Supervisor::new(spec, settings, state));
        let starter = sup.clone();
        std::thread::Builder::new()
            .name(format!("quiver-start-{}", sup.spec.plugin))
            .spawn(move || {
                let sup = starter;
                {
                    let kicked = sup.kick.0.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = sup.kick.1.wait_timeout_while(kicked, linger, |k| !*k);
                }
                let library = match read {
                    Some(read) => read().map(|library| {
                        let _ = sup.spec.library.0.set(library);
                    }),
                    None => Ok(()),
                };
                let outcome = library.map_err(|e| (Some(e.stage), e.message)).and_then(|()| {
                    sup.spawn()
                        .and_then(|(proc, ready)| match check(&ready) {
                            Ok(()) => Ok(proc),
                            Err(e) => {
                                proc.shared.kill("failed its load check".into());
                                Err(e)
                            }
                        })
                        .map_err(|e| (None, e))
                });
                let mut st = sup.state.lock().unwrap_or_else(|e| e.into_inner());
                st.starting = false;
                let error = match outcome {
                    // Unloaded meanwhile (disabled): the process is dropped, which ends it.
                    Ok(proc) if st.disabled.is_none() => {
                        st.current = Some(proc);
                        None
                    }
                    Ok(_) => None,
                    Err((stage, e)) => {
                        st.disabled = Some(format!("its worker could not be started: {e}"));
                        Some((stage, e))
                    }
                };
                drop(st);
                sup.changed.notify_waiters();
                if let Some((stage, e)) = error {
                    failed(stage, e);
                }
            })
            .map_err(|e| format!("cannot start a thread for the worker: {e}"))?;
        Ok(WorkerBackend { sup })
    }

    fn submit(
        sup: &Arc<Supervisor>,
        proc: &Arc<Proc>,
        tool: &str,
        request: String,
        sink: Arc<dyn CallSink>,
        deadline: Instant,
    ) -> Result<(u64, oneshot::Receiver<Answer>), ToolError> {
        let id = proc.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let inline = sup.spec.inline.iter().any(|t| t == tool);
        proc.shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Pending { tx, sink, tool: tool.to_owned() });
        let timeout_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64;
        let msg = ToWorker::Call { id, tool: tool.to_owned(), request, timeout_ms, inline };
        if let Err(e) = proc.send(&msg) {
            proc.shared.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            let code = if e.kind() == std::io::ErrorKind::InvalidData {
                ErrorCode::INVALID_ARGUMENTS
            } else {
                PLUGIN_UNAVAILABLE
            };
            return Err(ToolError::new(
                code,
                format!("cannot send the call to plugin `{}`'s worker: {e}", sup.spec.plugin),
            )
            .retryable());
        }
        Ok((id, rx))
    }
}

/// Where a started call stands, for its abort handle.
enum Slot {
    /// Not sent yet (waiting for a live worker).
    Waiting,
    /// Sent to a worker under this id.
    Sent(Arc<Proc>, u64),
    /// Aborted before it was sent: it never will be.
    Aborted,
}

impl ToolBackend for WorkerBackend {
    /// The blocking form, for callers without an async runtime (tests, tools): runs the call
    /// with no deadline of its own on a private single-thread runtime.
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn CallSink>) -> String {
        let deadline = Instant::now() + Duration::from_secs(24 * 3600);
        let call = self.start(tool, request.to_owned(), sink, deadline);
        let answer = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| ToolError::new(ErrorCode::PROTOCOL, format!("cannot wait for the worker: {e}")))
            .and_then(|rt| rt.block_on(call.answer));
        match answer {
            Ok(text) => text,
            Err(e) => serde_json::to_string(&quiver_abi::ToolResponse::error(e)).unwrap_or_default(),
        }
    }

    fn dispatch(&self, _index: usize) -> Dispatch {
        Dispatch::Remote
    }

    fn start(&self, tool: &str, request: String, sink: Arc<dyn CallSink>, deadline: Instant) -> RemoteCall {
        let sup = self.sup.clone();
        let slot = Arc::new(Mutex::new(Slot::Waiting));
        let tool = tool.to_owned();
        let answer_slot = slot.clone();
        let answer = Box::pin(async move {
            let proc = sup.live(deadline).await?;
            let rx = {
                let mut g = answer_slot.lock().unwrap_or_else(|e| e.into_inner());
                if matches!(*g, Slot::Aborted) {
                    return Err(ToolError::new(
                        ErrorCode::CANCELLED,
                        format!("`{tool}` was cancelled before it started"),
                    ));
                }
                let (id, rx) = WorkerBackend::submit(&sup, &proc, &tool, request, sink, deadline)?;
                *g = Slot::Sent(proc.clone(), id);
                rx
            };
            let plugin = sup.spec.plugin.clone();
            drop(sup);
            let answer = rx.await.unwrap_or_else(|_| {
                Err(ToolError::new(
                    PLUGIN_CRASHED,
                    format!("plugin `{plugin}`'s worker ended without answering `{tool}`"),
                ))
            });
            // Hold the process until the answer is in: a swapped-out worker exits only after
            // its last in-flight call.
            drop(proc);
            answer
        });
        let grace = self.sup.settings.kill_grace;
        let sup_for_abort = self.sup.clone();
        let abort = Box::new(move |reason: AbortReason| {
            let mut g = slot.lock().unwrap_or_else(|e| e.into_inner());
            let (proc, id) = match &*g {
                Slot::Waiting => {
                    *g = Slot::Aborted;
                    return;
                }
                Slot::Aborted => return,
                Slot::Sent(p, id) => (p.clone(), *id),
            };
            drop(g);
            let _ = proc.send(&ToWorker::Cancel { id });
            if reason == AbortReason::Deadline {
                // New calls wait for this worker's fate rather than join a process that may be
                // killed under them.
                proc.shared.draining.store(true, Ordering::Release);
                let shared = proc.shared.clone();
                let sup = Arc::downgrade(&sup_for_abort);
                drop(proc);
                let _ = std::thread::Builder::new().name("quiver-worker-deadline".into()).spawn(move || {
                    std::thread::sleep(grace);
                    let still_running = shared.pending.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&id);
                    if !still_running {
                        // The tool stopped when told: the worker is healthy.
                        shared.draining.store(false, Ordering::Release);
                        if let Some(sup) = sup.upgrade() {
                            sup.changed.notify_waiters();
                        }
                    } else {
                        // Logged once, as a warning, when the worker is seen to end (with
                        // this reason): here only at debug.
                        tracing::debug!(
                            pid = shared.pid,
                            "a call overran its deadline and ignored cancellation; killing its worker"
                        );
                        shared.kill(format!(
                            "a call overran its deadline and did not stop within {} ms of being cancelled",
                            grace.as_millis()
                        ));
                    }
                });
            }
        });
        RemoteCall { answer, abort }
    }

    fn placement(&self) -> Placement {
        let st = self.sup.state.lock().unwrap_or_else(|e| e.into_inner());
        let detail = match (&st.disabled, &st.current) {
            (Some(why), _) => format!("worker disabled: {why}"),
            (None, Some(p)) if p.shared.alive.load(Ordering::Acquire) => format!(
                "worker pid {}; {}",
                p.shared.pid,
                p.sandbox.get().map(String::as_str).unwrap_or("sandbox unknown")
            ),
            (None, None) if st.starting => "worker starting".to_owned(),
            _ => format!("worker restarting (last exit: {})", st.last_exit.as_deref().unwrap_or("unknown")),
        };
        Placement { isolation: "process", detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::{PathRule, ToWorker};

    /// The hello streamed from the library's sealed memory file (and from bytes in memory) is
    /// one frame that decodes to exactly those bytes and the other fields.
    #[test]
    fn the_streamed_hello_decodes_to_the_verified_bytes() {
        let bytes: Vec<u8> = (0..200_003u32).map(|i| (i % 251) as u8).collect();
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        std::io::Seek::rewind(&mut file).unwrap();
        let (sealed, sha256) = crate::library::read_hashed(file, bytes.len() as u64, 1 << 30, "t").unwrap();
        let sandbox = SandboxRules { paths: vec![PathRule { path: "/r".into(), write: true }], network: true };
        for library in [sealed, VerifiedLibrary::from_bytes(bytes.clone())] {
            let spec = WorkerSpec {
                plugin: "p".into(),
                library: WorkerLibrary::default(),
                sha256: sha256.clone(),
                sandbox: sandbox.clone(),
                inline: Vec::new(),
                adapter: None,
            };
            let mut wire = Vec::new();
            write_hello(&mut wire, &spec, &library).unwrap();
            let mut input = wire.as_slice();
            let decoded = protocol::read_frame::<ToWorker>(&mut input, &mut Vec::new()).unwrap();
            assert!(input.is_empty(), "one frame, {} bytes left over", input.len());
            let Some(ToWorker::Hello(h)) = decoded else { panic!("not a hello: {decoded:?}") };
            assert_eq!((h.protocol, h.plugin.as_str(), h.sha256.as_str()), (PROTOCOL_VERSION, "p", sha256.as_str()));
            assert!(h.library == bytes, "the library bytes differ");
            assert_eq!(h.sandbox, sandbox);
        }
    }
}
