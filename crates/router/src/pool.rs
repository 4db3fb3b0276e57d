//! The threads that run thread-execution calls: a pool of long-lived threads, started on
//! demand up to a bound, each parked on its own slot between calls. A call hands its job to an
//! idle thread (two uncontended locks and one `unpark`), and the caller waits for the answer
//! beside the call's deadline and cancellation, so a tool that hangs still gets its caller a
//! `timeout` at the deadline. No thread is started and no tokio blocking task is made per call.
//!
//! A thread whose caller stopped waiting (deadline, cancellation, dropped request) is
//! *retired*: it stops counting against the pool, a new thread takes its place at once, and the
//! retired thread ends when its plugin call finally returns. A panic that escapes a job (a
//! host-side defect: plugins catch their own) drops the job's answer, which the caller reports
//! as an error, and the thread goes on serving.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// One unit of work: the plugin call, then the sending of its answer (after the thread is
/// listed as idle again, so a caller that gets the answer and calls again finds it idle).
pub(crate) trait Work: Send + 'static {
    /// Runs the call.
    fn run(&mut self);
    /// Hands the answer to the caller.
    fn answer(self: Box<Self>);
}

pub(crate) type Job = Box<dyn Work>;

/// How long an idle thread waits for work before it ends.
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// Stack size of a pool thread (the standard library's default for spawned threads).
const STACK: usize = 2 * 1024 * 1024;

/// A slot's state: the low two bits, and above them the number of jobs it finished (so a
/// late [`Pool::retire`] cannot retire the thread's next job).
const IDLE: u64 = 0;
const BUSY: u64 = 1;
const RETIRED: u64 = 2;
const MASK: u64 = 3;

/// One pool thread's mailbox.
struct Slot {
    job: Mutex<Option<Job>>,
    state: AtomicU64,
    /// Set once the thread exists (before the slot is listed or handed out).
    thread: OnceLock<Thread>,
}

struct Shared {
    /// Idle threads, the most recently used last (the warmest is taken first).
    idle: Mutex<Vec<Arc<Slot>>>,
    /// Threads that count against the bound (busy or idle; not retired).
    live: AtomicUsize,
    max: usize,
    /// The pool was dropped: idle threads end.
    closing: AtomicBool,
}

/// The pool (owned by the router; its threads end when it is dropped and they are idle).
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

/// A job handed to a thread: what [`Pool::retire`] needs.
pub(crate) struct Ticket {
    slot: Arc<Slot>,
    state: u64,
}

/// Why a job was not taken.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Every thread is busy and the pool is at its bound.
    Full(usize),
    /// The system would not start another thread.
    Spawn(std::io::Error),
}

fn unpark(slot: &Slot) {
    if let Some(t) = slot.thread.get() {
        t.unpark();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// A pool of at most `max` threads (none started yet).
    pub(crate) fn new(max: usize) -> Pool {
        Pool {
            shared: Arc::new(Shared {
                idle: Mutex::new(Vec::new()),
                live: AtomicUsize::new(0),
                max: max.max(1),
                closing: AtomicBool::new(false),
            }),
        }
    }

    /// Runs `job` on an idle thread, or on a new one while the pool is under its bound.
    pub(crate) fn run(&self, job: Job) -> Result<Ticket, Refused> {
        let idle = lock(&self.shared.idle).pop();
        if let Some(slot) = idle {
            // Idle and unlisted: only this caller touches its state until the job is in.
            let state = (slot.state.load(Ordering::Acquire) & !MASK) | BUSY;
            slot.state.store(state, Ordering::Release);
            *lock(&slot.job) = Some(job);
            unpark(&slot);
            return Ok(Ticket { slot, state });
        }
        let mut live = self.shared.live.load(Ordering::Relaxed);
        loop {
            if live >= self.shared.max {
                return Err(Refused::Full(self.shared.max));
            }
            match self.shared.live.compare_exchange_weak(live, live + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => live = now,
            }
        }
        let slot = start(&self.shared, Some(job)).inspect_err(|_| {
            self.shared.live.fetch_sub(1, Ordering::AcqRel);
        })?;
        Ok(Ticket { slot, state: BUSY })
    }

    /// The caller of `ticket`'s job stopped waiting: unless the job already finished, its thread
    /// stops counting against the pool (it ends when the job returns) and a new idle thread
    /// takes its place.
    pub(crate) fn retire(&self, ticket: &Ticket) {
        let retired = (ticket.state & !MASK) | RETIRED;
        if ticket.slot.state.compare_exchange(ticket.state, retired, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        if let Err(e) = start(&self.shared, None) {
            self.shared.live.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(error = ?e, "cannot start a thread in place of one held by an abandoned call");
        }
    }

    /// Threads counted against the bound (busy or idle) and idle threads.
    #[cfg(test)]
    pub(crate) fn threads(&self) -> (usize, usize) {
        (self.shared.live.load(Ordering::Acquire), lock(&self.shared.idle).len())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        for slot in lock(&self.shared.idle).iter() {
            unpark(slot);
        }
    }
}

/// Starts a thread (its place under the bound already counted), with a first job or idle.
/// Does not wait for the thread to run: a caller retiring a thread at its deadline answers at
/// once.
fn start(shared: &Arc<Shared>, job: Option<Job>) -> Result<Arc<Slot>, Refused> {
    let busy = job.is_some();
    let slot = Arc::new(Slot {
        job: Mutex::new(job),
        state: AtomicU64::new(if busy { BUSY } else { IDLE }),
        thread: OnceLock::new(),
    });
    let (pool, own) = (shared.clone(), slot.clone());
    let handle = std::thread::Builder::new()
        .name("quiver-tool".to_owned())
        .stack_size(STACK)
        .spawn(move || {
            own.thread.get_or_init(std::thread::current);
            serve(&pool, &own);
        })
        .map_err(Refused::Spawn)?;
    slot.thread.get_or_init(|| handle.thread().clone());
    if !busy {
        lock(&shared.idle).push(slot.clone());
    }
    Ok(slot)
}

/// A pool thread: runs jobs until it is retired, the pool is dropped, or it idled for
/// [`KEEP_ALIVE`].
fn serve(shared: &Shared, slot: &Arc<Slot>) {
    // When the current idle stretch began (wake-ups without a job are normal: a stale
    // `unpark` token, or one that raced the job's arrival).
    let mut idle_since: Option<Instant> = None;
    loop {
        let job = lock(&slot.job).take();
        let Some(job) = job else {
            if slot.state.load(Ordering::Acquire) & MASK != IDLE {
                // Taken by a caller whose job is on its way (its `unpark` follows).
                std::thread::park();
                continue;
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            let left = KEEP_ALIVE.saturating_sub(since.elapsed());
            if (shared.closing.load(Ordering::Acquire) || left.is_zero()) && leave(shared, slot) {
                return;
            }
            std::thread::park_timeout(left.max(Duration::from_millis(1)));
            continue;
        };
        idle_since = None;
        // A panic here is a host defect (plugins catch their own); the job is dropped with
        // its answer unsent, which the caller reports, and the thread keeps serving.
        let mut job = job;
        let ran = catch_unwind(AssertUnwindSafe(|| job.run())).is_ok();
        if !ran {
            tracing::error!("a thread-execution call panicked in the host; its caller gets an error");
        }
        let state = slot.state.load(Ordering::Acquire);
        let next = ((state & !MASK) + (MASK + 1)) | IDLE;
        let retired = state & MASK != BUSY
            || slot.state.compare_exchange(state, next, Ordering::AcqRel, Ordering::Acquire).is_err();
        let closing = !retired && shared.closing.load(Ordering::Acquire);
        if closing {
            shared.live.fetch_sub(1, Ordering::AcqRel);
        } else if !retired {
            lock(&shared.idle).push(slot.clone());
        }
        if ran {
            job.answer();
        } else {
            drop(job);
        }
        if retired || closing {
            // Retired while it ran (its place was already given to a new thread), or the
            // pool is gone.
            return;
        }
    }
}

/// Leaves the pool if the thread is still listed as idle (nobody took it in the meantime);
/// false when a job is on its way.
fn leave(shared: &Shared, slot: &Arc<Slot>) -> bool {
    let mut idle = lock(&shared.idle);
    let Some(i) = idle.iter().position(|s| Arc::ptr_eq(s, slot)) else { return false };
    idle.remove(i);
    shared.live.fetch_sub(1, Ordering::AcqRel);
    true
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// A job that waits for `go` (when given), then panics or sends `n` on `done`.
    struct Probe {
        go: Option<mpsc::Receiver<()>>,
        panic: bool,
        n: u32,
        done: mpsc::Sender<u32>,
    }

    impl Work for Probe {
        fn run(&mut self) {
            if let Some(go) = &self.go {
                let _ = go.recv();
            }
            assert!(!self.panic, "a host-side panic in a pool job (expected by the test)");
        }
        fn answer(self: Box<Self>) {
            let _ = self.done.send(self.n);
        }
    }

    fn probe(n: u32, done: &mpsc::Sender<u32>) -> Job {
        Box::new(Probe { go: None, panic: false, n, done: done.clone() })
    }

    fn gated(n: u32, done: &mpsc::Sender<u32>) -> (Job, mpsc::Sender<()>) {
        let (tx, rx) = mpsc::channel();
        (Box::new(Probe { go: Some(rx), panic: false, n, done: done.clone() }), tx)
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn one_thread_serves_calls_one_after_another() {
        let pool = Pool::new(4);
        let (done, answers) = mpsc::channel();
        for n in 0..200 {
            pool.run(probe(n, &done)).expect("taken");
            assert_eq!(answers.recv_timeout(WAIT), Ok(n));
        }
        // Listed as idle before it answers: a caller that calls again finds it.
        assert_eq!(pool.threads(), (1, 1));
    }

    #[test]
    fn a_full_pool_refuses_and_a_retired_thread_is_replaced() {
        let pool = Pool::new(1);
        let (done, answers) = mpsc::channel();
        let (stuck, release) = gated(1, &done);
        let ticket = pool.run(stuck).expect("taken");
        assert!(matches!(pool.run(probe(2, &done)), Err(Refused::Full(1))));
        // The caller gave up: a new thread takes the stuck one's place.
        pool.retire(&ticket);
        assert_eq!(pool.threads(), (1, 1));
        pool.run(probe(3, &done)).expect("the replacement takes work");
        assert_eq!(answers.recv_timeout(WAIT), Ok(3));
        // The stuck call finishes later; its thread ends instead of joining the pool.
        release.send(()).expect("release");
        assert_eq!(answers.recv_timeout(WAIT), Ok(1));
        let started = std::time::Instant::now();
        while pool.threads() != (1, 1) && started.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(pool.threads(), (1, 1));
    }

    #[test]
    fn a_late_retire_does_not_touch_the_threads_next_call() {
        let pool = Pool::new(1);
        let (done, answers) = mpsc::channel();
        let first = pool.run(probe(1, &done)).expect("taken");
        assert_eq!(answers.recv_timeout(WAIT), Ok(1));
        let (next, release) = gated(2, &done);
        let _second = pool.run(next).expect("the same thread");
        pool.retire(&first);
        // Still one thread, busy with the second call: nothing was started in its place.
        assert_eq!(pool.threads(), (1, 0));
        assert!(matches!(pool.run(probe(3, &done)), Err(Refused::Full(1))));
        release.send(()).expect("release");
        assert_eq!(answers.recv_timeout(WAIT), Ok(2));
    }

    #[test]
    fn a_panicking_job_drops_its_answer_and_the_thread_keeps_serving() {
        let pool = Pool::new(1);
        let (done, answers) = mpsc::channel();
        pool.run(Box::new(Probe { go: None, panic: true, n: 1, done: done.clone() })).expect("taken");
        // The panicking job's thread is busy until its panic is reported, then idle again.
        let started = std::time::Instant::now();
        while let Err(refused) = pool.run(probe(2, &done)) {
            assert!(matches!(refused, Refused::Full(1)), "{refused:?}");
            assert!(started.elapsed() < WAIT, "the thread did not come back after the panic");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(answers.recv_timeout(WAIT), Ok(2), "the panicked job sent no answer");
        assert_eq!(pool.threads().0, 1);
    }
}
