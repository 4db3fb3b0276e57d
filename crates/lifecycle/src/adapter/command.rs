//! Command adapters: one process per call, started with `execve` directly (no shell), its argv
//! built from the tool's templates (one rendered template = one argv element), stdin from the
//! arguments, stdout parsed as JSON or text, the exit code mapped to a result or an error.
//!
//! The process runs in its own process group with an empty environment plus the resolved
//! allow-list; at the deadline or on cancellation the whole group is killed, and the program
//! dies with the host (`PR_SET_PDEATHSIG`). Its stdout and stderr are read by the calling thread
//! in the loop that waits for its exit, so when it has exited the call answers with what it
//! printed, even if a process it started outside its group still holds the pipes; the pipes are
//! closed when the call is done and no thread is left waiting on them.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quiver_abi::{ErrorCode, ToolError};
use quiver_catalog::CallSink;
use serde_json::Value;

use super::{MAX_OUTPUT_BYTES, Resolved, ToolPlan, excerpt, mapped_error, parse_output, payload};

/// Largest stderr kept for error messages.
const MAX_STDERR_BYTES: usize = 64 << 10;

/// How long the pipes are still read once the program has exited and its group was killed: what
/// is in them is read at once, and the end of file comes as soon as the group's processes are
/// gone. A process that left the group may keep them open for ever; it is not waited for.
const DRAIN_GRACE: Duration = Duration::from_millis(100);

/// What one read takes from a pipe (a pipe's default capacity).
const CHUNK: usize = 64 << 10;

pub(crate) struct CommandRunner {
    program: String,
    working_dir: String,
    env: Vec<(String, String)>,
}

/// Puts a pipe end into non-blocking mode.
fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl on a pipe end this process owns; only its status flags change.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// One of the program's output pipes, read without blocking: at most `cap` bytes are kept, the
/// rest is read and dropped so the program never blocks on a full pipe.
struct Capture {
    /// `None` once the pipe reached its end (or failed); dropping it closes it.
    pipe: Option<File>,
    kept: Vec<u8>,
    cap: usize,
    /// Whether the program printed more than `cap` bytes.
    over: bool,
}

impl Capture {
    fn new(pipe: Option<impl Into<OwnedFd>>, cap: usize) -> Capture {
        let pipe = pipe.map(|p| File::from(p.into()));
        if let Some(p) = &pipe {
            set_nonblocking(p.as_raw_fd());
        }
        Capture { pipe, kept: Vec::new(), cap, over: false }
    }

    /// What was kept and whether there was more; closes the pipe.
    fn finish(self) -> (Vec<u8>, bool) {
        (self.kept, self.over)
    }

    fn fd(&self) -> Option<RawFd> {
        self.pipe.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Reads once from the pipe (it is ready); at its end, or on an error, closes it.
    fn read_once(&mut self, chunk: &mut [u8]) {
        let Some(pipe) = &mut self.pipe else { return };
        match pipe.read(chunk) {
            Ok(0) => self.pipe = None,
            Ok(n) => {
                let keep = n.min(self.cap - self.kept.len());
                self.kept.extend_from_slice(&chunk[..keep]);
                self.over |= keep < n;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(_) => self.pipe = None,
        }
    }
}

/// Waits up to `timeout` for any of `fds` to be ready (or for the timeout alone when there are
/// none) and returns the ready ones.
fn poll(fds: &[RawFd], timeout: Duration) -> Vec<RawFd> {
    let mut set: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // Rounded up, so a wait shorter than a millisecond still waits.
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    // SAFETY: polls valid fds this process owns, `set.len()` entries.
    let n = unsafe { libc::poll(set.as_mut_ptr(), set.len() as libc::nfds_t, ms) };
    if n <= 0 {
        return Vec::new();
    }
    set.iter().filter(|p| p.revents != 0).map(|p| p.fd).collect()
}

/// Writes `bytes` to the program's stdin on a thread of its own, so a program that reads its
/// input while it prints never deadlocks with the host. The pipe is non-blocking and the thread
/// looks at `stop` every 10 ms, so it ends when the call does even if a process that left the
/// program's group holds the pipe and never reads it.
fn spawn_writer(stdin: std::process::ChildStdin, bytes: Vec<u8>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // A program may exit without reading all of its stdin. The host keeps SIGPIPE at its
        // default (the CLI does, so `quiver list | head` ends quietly), so block it on this
        // thread: the write then fails with EPIPE instead of killing the host. The signal stays
        // pending on this thread only and is discarded when the thread ends.
        // SAFETY: changes this thread's own signal mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        let mut pipe = File::from(OwnedFd::from(stdin));
        set_nonblocking(pipe.as_raw_fd());
        let mut rest = &bytes[..];
        while !rest.is_empty() && !stop.load(Ordering::Relaxed) {
            match pipe.write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let mut p = libc::pollfd { fd: pipe.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                    // SAFETY: polls one valid fd this thread owns.
                    unsafe {
                        libc::poll(&mut p, 1, 10);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // EPIPE: the program closed its stdin; the rest is not wanted.
                Err(_) => break,
            }
        }
        // Dropping the pipe closes it: the program reads the end of its input.
    })
}

impl CommandRunner {
    pub(crate) fn new(resolved: &Resolved) -> Result<CommandRunner, String> {
        let program = resolved.program.clone().ok_or("a command adapter without a resolved program")?;
        Ok(CommandRunner { program, working_dir: resolved.working_dir.clone(), env: resolved.env.clone() })
    }

    /// The argv after the program: each template rendered to exactly one element; an element
    /// naming an absent argument is left out.
    pub(crate) fn argv(plan: &ToolPlan, args: &Value) -> Result<Vec<String>, ToolError> {
        let mut out = Vec::with_capacity(plan.args.len());
        for t in &plan.args {
            if let Some(a) = t.render(args, str::to_owned) {
                if a.contains('\0') {
                    return Err(ToolError::invalid(
                        "an argument contains a NUL character, which a command line cannot carry; remove it",
                    ));
                }
                out.push(a);
            }
        }
        Ok(out)
    }

    pub(crate) fn run(
        &self,
        plan: &ToolPlan,
        args: &Value,
        deadline: Instant,
        sink: &dyn CallSink,
    ) -> Result<Value, ToolError> {
        let argv = Self::argv(plan, args)?;
        let name = self.program.rsplit('/').next().unwrap_or(&self.program).to_owned();
        let mut cmd = Command::new(&self.program);
        cmd.args(&argv)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.working_dir)
            .stdin(if plan.invoke.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // The program dies with the host: the kernel sends it SIGKILL when the thread that
        // started it ends (PR_SET_PDEATHSIG follows the forking thread, not the process). That
        // thread is this one, which waits for the program below until it is reaped, so within a
        // call it never ends first; when the host (or the worker) dies, it ends with it. A parent
        // that died between the fork and the prctl is not signalled, so the child checks that
        // its parent is still the one that forked it. Processes the program starts are not
        // covered (the group kill ends them while the host lives).
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            ToolError::tool(format!(
                "cannot start `{}` in {}: {e}; check that it is installed and the folder exists (and, in a worker, that the sandbox grants it)",
                self.program, self.working_dir
            ))
        })?;
        let pid = child.id() as i32;
        let stop = Arc::new(AtomicBool::new(false));
        let writer = match (plan.invoke.stdin.as_ref(), child.stdin.take()) {
            (Some(p), Some(stdin)) => Some(spawn_writer(stdin, payload(p, args).0, stop.clone())),
            _ => None,
        };
        let mut out = Capture::new(child.stdout.take(), MAX_OUTPUT_BYTES);
        let mut err = Capture::new(child.stderr.take(), MAX_STDERR_BYTES);
        let mut chunk = vec![0u8; CHUNK];
        let kill = || {
            // SAFETY: signals our own child's process group (it was started with its own group).
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        };
        // Reads what is ready in the pipes, waiting up to `timeout` (and for `extra` too).
        let mut read_ready = |out: &mut Capture, err: &mut Capture, extra: Option<RawFd>, timeout: Duration| {
            let fds: Vec<RawFd> = [out.fd(), err.fd(), extra].into_iter().flatten().collect();
            for fd in poll(&fds, timeout) {
                if out.fd() == Some(fd) {
                    out.read_once(&mut chunk);
                } else if err.fd() == Some(fd) {
                    err.read_once(&mut chunk);
                }
            }
        };
        // A pidfd becomes readable when the program exits, so the wait wakes at once (as it does
        // for output, and every 10 ms to look at cancellation); without pidfds (Linux < 5.3),
        // short sleeps unless output comes.
        // SAFETY: pidfd_open on our own, not yet reaped child; the fd is closed below.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        let mut pause = Duration::from_millis(1);
        let result = loop {
            // Exited? Asked without reaping (WNOWAIT): while the leader is a zombie its group id
            // cannot be reused, so the group kill below can only reach its own processes.
            // SAFETY: waitid on our own child with a zeroed siginfo_t it fills in.
            let exited = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let r = libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                );
                r == 0 && info.si_pid() != 0
            };
            if exited {
                break Ok(());
            }
            let now = Instant::now();
            if now >= deadline || sink.is_cancelled() {
                kill();
                let _ = child.wait();
                break Err(if now >= deadline {
                    ToolError::new(
                        ErrorCode::TIMEOUT,
                        format!("`{name}` did not finish before the deadline; it was killed"),
                    )
                    .retryable()
                } else {
                    ToolError::new(ErrorCode::CANCELLED, format!("the call was cancelled; `{name}` was killed"))
                });
            }
            let wait = (deadline - now).min(Duration::from_millis(10));
            if pidfd >= 0 {
                read_ready(&mut out, &mut err, Some(pidfd), wait);
            } else {
                read_ready(&mut out, &mut err, None, pause.min(wait));
                pause = (pause * 2).min(Duration::from_millis(10));
            }
        };
        if pidfd >= 0 {
            // SAFETY: closes the pidfd opened above, once.
            unsafe {
                libc::close(pidfd);
            }
        }
        let status = match result {
            Ok(()) => {
                // The program is done; anything it left running in its group (holding the pipes
                // open) goes too. What the pipes hold is read, up to their end or the grace
                // (within the deadline); then the leader is reaped.
                kill();
                let until = (Instant::now() + DRAIN_GRACE).min(deadline);
                loop {
                    let now = Instant::now();
                    if out.pipe.is_none() && err.pipe.is_none() {
                        break;
                    }
                    read_ready(&mut out, &mut err, None, until.saturating_duration_since(now));
                    if now >= until {
                        break;
                    }
                }
                child.wait().map_err(|e| ToolError::tool(format!("cannot wait for `{name}`: {e}")))
            }
            Err(e) => Err(e),
        };
        stop.store(true, Ordering::Relaxed);
        if let Some(w) = writer {
            let _ = w.join();
        }
        // The pipes are closed here, whoever else still holds them.
        let (out, out_over) = out.finish();
        let (err, _) = err.finish();
        let status = status?;
        let err_text = String::from_utf8_lossy(&err);
        let code = match status.code() {
            Some(c) => c,
            None => {
                return Err(ToolError::tool(format!(
                    "`{name}` was killed by signal {}{}",
                    status.signal().unwrap_or(0),
                    if err_text.trim().is_empty() { String::new() } else { format!(": {}", excerpt(&err_text)) }
                )));
            }
        };
        let ok = code == 0 || plan.invoke.ok.iter().any(|c| i32::from(*c) == code);
        if !ok {
            let detail =
                if err_text.trim().is_empty() { excerpt(&String::from_utf8_lossy(&out)) } else { excerpt(&err_text) };
            return Err(mapped_error(
                &plan.invoke,
                code.clamp(0, i32::from(u16::MAX)) as u16,
                format!("`{name}` exited with status {code}: {detail}"),
                false,
            ));
        }
        if out_over {
            return Err(ToolError::tool(format!(
                "`{name}` printed more than {MAX_OUTPUT_BYTES} bytes; narrow the request"
            )));
        }
        parse_output(plan.invoke.output, &out, &format!("the output of `{name}`"))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use quiver_abi::ToolResponse;
    use quiver_catalog::{NullSink, ToolBackend};
    use quiver_manifest::Manifest;
    use serde_json::{Value, json};

    use crate::adapter::{Adapter, in_process_placement, resolve};

    /// Runs `script` with `sh -c` as a command adapter's tool and returns the response.
    fn run_script(script: &str, output: &str) -> ToolResponse {
        let y = format!(
            "manifest_version: 1\nid: demo\nversion: 0.1.0\ndisplay_name: Demo\ndescription: A demo.\nabi: 1\nadapter:\n  command: {{program: sh}}\ntools:\n  - name: demo_run\n    title: Run\n    description: Runs.\n    side_effects: read\n    input_schema: {{type: object, properties: {{}}}}\n    invoke: {{args: [\"-c\", {}], output: {output}}}\n",
            Value::String(script.to_owned())
        );
        let m = Manifest::from_yaml(&y, "demo.tool.yaml").unwrap();
        let resolved = resolve(&m, Path::new("/"), |_| None).unwrap();
        let adapter = Adapter::new(&m, resolved, in_process_placement("command")).unwrap();
        let request = json!({"request_id": "r", "tool_id": "demo_run", "tool_version": "0.1.0", "timestamp": 0});
        serde_json::from_str(&adapter.invoke("demo_run", &request.to_string(), Arc::new(NullSink))).unwrap()
    }

    /// Stdout is kept up to its cap, byte for byte; one byte more is an error, never a cut.
    #[test]
    fn stdout_is_read_whole_up_to_its_cap_and_more_is_an_error() {
        let cap = super::MAX_OUTPUT_BYTES;
        let r = run_script(&format!("head -c {cap} /dev/zero | tr '\\0' x"), "text");
        let text = r.outputs["text"].as_str().unwrap_or_else(|| panic!("{:?}", r.error));
        assert!(text.len() == cap && text.bytes().all(|b| b == b'x'), "{} bytes", text.len());

        let r = run_script(&format!("head -c {} /dev/zero", cap + 1), "text");
        let e = r.error.unwrap();
        assert!(e.message.contains(&format!("printed more than {cap} bytes")), "{e:?}");
    }

    /// A failing program's stderr (stdout when stderr is empty) words the error; both pipes are
    /// read while it runs, so one that fills stderr first does not block.
    #[test]
    fn a_failure_is_worded_from_stderr_even_a_large_one() {
        let r = run_script("head -c 200000 /dev/zero | tr '\\0' e >&2; echo out; exit 4", "text");
        let e = r.error.unwrap();
        // (`sh` is found as what it links to, `dash` here.)
        assert!(e.message.contains("` exited with status 4: eee"), "{e:?}");
        let r = run_script("echo only stdout; exit 4", "text");
        assert!(r.error.unwrap().message.ends_with("status 4: only stdout"));
        let r = run_script("printf '{{\"a\": 1}}'", "json");
        assert_eq!(r.outputs, json!({"result": {"a": 1}}), "{r:?}");
    }
}
