//! Command adapters: one process per call, started with `execve` directly (no shell), its argv
//! built from the tool's templates (one rendered template = one argv element), stdin from the
//! arguments, stdout parsed as JSON or text, the exit code mapped to a result or an error.
//!
//! The process runs in its own process group with an empty environment plus the resolved
//! allow-list; at the deadline or on cancellation the whole group is killed.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quiver_abi::{ErrorCode, ToolError};
use quiver_catalog::CallSink;
use serde_json::Value;

use super::{MAX_OUTPUT_BYTES, Resolved, ToolPlan, excerpt, mapped_error, parse_output, payload};

/// Largest stderr kept for error messages.
const MAX_STDERR_BYTES: usize = 64 << 10;

pub(crate) struct CommandRunner {
    program: String,
    working_dir: String,
    env: Vec<(String, String)>,
}

/// Reads at most `cap` bytes; reports whether there was more.
fn read_capped(mut r: impl Read, cap: usize) -> (Vec<u8>, bool) {
    let mut buf = Vec::new();
    let _ = (&mut r).take(cap as u64 + 1).read_to_end(&mut buf);
    let over = buf.len() > cap;
    buf.truncate(cap);
    // Drain the rest so the program never blocks on a full pipe.
    let _ = std::io::copy(&mut r, &mut std::io::sink());
    (buf, over)
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
        let mut child = cmd.spawn().map_err(|e| {
            ToolError::tool(format!(
                "cannot start `{}` in {}: {e}; check that it is installed and the folder exists (and, in a worker, that the sandbox grants it)",
                self.program, self.working_dir
            ))
        })?;
        let pid = child.id() as i32;
        let writer = match (plan.invoke.stdin.as_ref(), child.stdin.take()) {
            (Some(p), Some(mut stdin)) => {
                let (bytes, _) = payload(p, args);
                Some(std::thread::spawn(move || {
                    // A program may exit without reading all of its stdin. The host keeps
                    // SIGPIPE at its default (the CLI does, so `quiver list | head` ends
                    // quietly), so block it on this thread: the write then fails with EPIPE
                    // instead of killing the host. The signal stays pending on this thread
                    // only and is discarded when the thread ends.
                    // SAFETY: changes this thread's own signal mask.
                    unsafe {
                        let mut set: libc::sigset_t = std::mem::zeroed();
                        libc::sigemptyset(&mut set);
                        libc::sigaddset(&mut set, libc::SIGPIPE);
                        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                    }
                    let _ = stdin.write_all(&bytes);
                }))
            }
            _ => None,
        };
        let stdout = child.stdout.take().map(|o| std::thread::spawn(move || read_capped(o, MAX_OUTPUT_BYTES)));
        let stderr = child.stderr.take().map(|e| std::thread::spawn(move || read_capped(e, MAX_STDERR_BYTES)));
        let kill = || {
            // SAFETY: signals our own child's process group (it was started with its own group).
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        };
        // A pidfd becomes readable when the program exits, so the wait wakes at once (and every
        // 10 ms to look at cancellation); without pidfds (Linux < 5.3), short sleeps.
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
                let mut fds = libc::pollfd { fd: pidfd, events: libc::POLLIN, revents: 0 };
                // SAFETY: polls one valid fd we own.
                unsafe {
                    libc::poll(&mut fds, 1, wait.as_millis().max(1) as i32);
                }
            } else {
                std::thread::sleep(pause.min(wait));
                pause = (pause * 2).min(Duration::from_millis(10));
            }
        };
        if pidfd >= 0 {
            // SAFETY: closes the pidfd opened above, once.
            unsafe {
                libc::close(pidfd);
            }
        }
        result?;
        // The program is done; anything it left running in its group (holding the pipes open)
        // goes too, then the leader is reaped.
        kill();
        let status = child.wait().map_err(|e| ToolError::tool(format!("cannot wait for `{name}`: {e}")))?;
        if let Some(w) = writer {
            let _ = w.join();
        }
        let (out, out_over) = stdout.and_then(|h| h.join().ok()).unwrap_or_default();
        let (err, _) = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
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
