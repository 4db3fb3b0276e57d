//! The threads that run thread-execution calls: a pool of long-lived threads, started on
//! demand up to a bound, each parked on its own slot between calls. A call hands its job to an
//! idle thread (one uncontended lock, and an `unpark` if it sleeps), first to the one it handed
//! its last job to, and the caller waits for the answer beside the call's deadline and
//! cancellation, so a tool that hangs still gets its caller a `timeout` at the deadline. No
//! thread is started and no tokio blocking task is made per call.
//!
//! Sleeping and waking a thread costs a system call on each side and, when the woken thread's
//! core is idle, an inter-processor wake-up (measured at 10-15 µs per call on a 2-vCPU virtual
//! machine, far more than a fast tool's work). So both sides *spin briefly* where it pays: a
//! caller waits for a tool's answer without sleeping for up to [`SPIN`] while that tool's recent
//! calls ran within half of it ([`SpinHint`]), and a pool thread waits for its next job for up to
//! [`IDLE_SPIN`] after one that arrived within half of that of the thread becoming idle (a
//! burst; the window covers a caller that slept and woke slowly, see [`IDLE_SPIN`]). Neither
//! spins on a single CPU, a slow tool's caller never spins, and a thread between sparse calls
//! sleeps at once; the most a spin can waste is [`SPIN`] per call on the caller's side, and on
//! the thread's side [`IDLE_SPIN`] once per burst (or per gap, while gaps stay within half of it).
//!
//! A thread whose caller stopped waiting (deadline, cancellation, dropped request) is
//! *retired*: it stops counting against the pool, a new thread takes its place at once, and the
//! retired thread ends when its plugin call finally returns. A panic that escapes a job (a
//! host-side defect: plugins catch their own) drops the job's answer, which the caller reports
//! as an error, and the thread goes on serving.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
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

/// The longest a caller spins for its answer before it sleeps (see the module's doc). Longer
/// than a pool thread's slow wake-up: on this project's 2-vCPU machines a wake-up takes 5-6 µs
/// in one state and 25-30 µs in another (the host's placement of the virtual CPUs changes over
/// minutes). At 20 µs, a caller whose tool's thread had gone to sleep missed in the slow state,
/// slept, and its own slow wake-up through the runtime could make the next call's gap too long
/// for a burst: sustained handoffs of 4.7-9.2 µs (multi-thread) and once 31.7 µs
/// (current-thread), with 0.05-0.65 sleeps per call. Within tokio's guidance for the time a
/// task runs between `.await`s (10-100 µs).
pub(crate) const SPIN: Duration = Duration::from_micros(50);

/// The longest an idle pool thread spins for the next job of a burst; a job that came within
/// half of it after the thread became idle makes a burst. Longer than [`SPIN`] because the
/// gap between two jobs includes the caller's own wake-up when the caller slept. With a window
/// of 20 µs, one preempted call in the slow state made every later job's gap longer than the
/// window: the thread slept after each job, each of its wake-ups outlasted the caller's spin,
/// and the handoff stayed at 7-22 µs until the burst ended. Sparse calls (gaps over half of
/// this) never make it spin.
pub(crate) const IDLE_SPIN: Duration = Duration::from_micros(100);

/// Whether spinning can pay at all: never on a single CPU, where the spinner would only keep
/// the thread it waits for off the processor.
fn can_spin() -> bool {
    static MANY: OnceLock<bool> = OnceLock::new();
    *MANY.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// Spins until `done` holds or `until` passes (the clock is read every 32 turns); whether
/// `done` held.
pub(crate) fn spin_until(until: Instant, mut done: impl FnMut() -> bool) -> bool {
    loop {
        for _ in 0..32 {
            if done() {
                return true;
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= until {
            return done();
        }
    }
}

/// How long one tool's thread calls recently ran (a moving average of the plugin call alone, in
/// nanoseconds): its callers spin for the answer only while that is within half of [`SPIN`]
/// (the rest covers the hand-off both ways). Starts at zero, so a tool's first call spins; one
/// slow call lifts the average over the line and its callers sleep until fast calls bring it
/// down again.
#[derive(Default)]
pub(crate) struct SpinHint {
    recent_ns: AtomicU32,
}

impl SpinHint {
    /// How long a caller of the tool should spin for its answer, if at all.
    pub(crate) fn budget(&self) -> Option<Duration> {
        let fast = u128::from(self.recent_ns.load(Ordering::Relaxed)) <= SPIN.as_nanos() / 2;
        (fast && can_spin()).then_some(SPIN)
    }

    /// A caller spun for its whole budget without an answer: the tool ran fast, but its thread
    /// did not get a processor in time. Counts as a call of [`SPIN`]: one such miss (a thread
    /// preempted once) leaves spinning on, three in a row (a saturated machine) stop it until
    /// fast calls bring the average back.
    pub(crate) fn missed(&self) {
        self.record(SPIN);
    }

    /// Records how long one call ran (or how long its caller waited before its deadline
    /// passed). Racing updates may lose one sample; the average is a hint.
    pub(crate) fn record(&self, took: Duration) {
        let took = u32::try_from(took.as_nanos()).unwrap_or(u32::MAX);
        let old = self.recent_ns.load(Ordering::Relaxed);
        // A quarter of the new sample: a few fast calls bring one slow call's average back.
        let new = old - old / 4 + took / 4;
        self.recent_ns.store(new, Ordering::Relaxed);
    }
}

/// A slot's state: the low two bits, and above them the number of jobs it finished (so a
/// late [`Pool::retire`] cannot retire the thread's next job).
const IDLE: u64 = 0;
const BUSY: u64 = 1;
const RETIRED: u64 = 2;
/// The thread ended after idling (or with its pool): nobody can take it any more.
const LEFT: u64 = 3;
const MASK: u64 = 3;

/// One pool thread's mailbox. Everything a hand-over touches shares one 64-byte cache line
/// (the reference counts of its `Arc` sit in the line before), so a call moves one line to the
/// thread's processor and back.
#[repr(C, align(64))]
struct Slot {
    state: AtomicU64,
    /// A job is in `job` (set after it is put there): what a spinning thread watches.
    posted: AtomicBool,
    /// The thread is about to sleep or sleeps: a caller that posted a job must wake it. A
    /// spinning thread is not woken (the wake-up token would only touch its parker's memory,
    /// from the caller's processor, for nothing).
    sleeping: AtomicBool,
    /// In the pool's idle list (changed only under its lock). A slot a caller took straight
    /// from its warm cache stays listed while busy, so its thread does not list itself again.
    listed: AtomicBool,
    /// The job, and when its caller handed it over.
    job: Mutex<Option<(Job, Instant)>>,
    /// Set once the thread exists (before the slot is listed or handed out); read only to
    /// wake a sleeping thread.
    thread: OnceLock<Thread>,
}

impl Slot {
    /// Takes the slot for a job if its thread is idle; the state the job runs under.
    fn claim(&self) -> Option<u64> {
        let now = self.state.load(Ordering::Acquire);
        if now & MASK != IDLE {
            return None;
        }
        let busy = (now & !MASK) | BUSY;
        self.state.compare_exchange(now, busy, Ordering::AcqRel, Ordering::Relaxed).ok().map(|_| busy)
    }
}

thread_local! {
    /// The slot this caller's thread handed its last job to, and its pool (held weakly, so
    /// the address cannot be another pool's): tried first, since between back-to-back calls
    /// that thread is idle and, in a burst, spinning for the next job. Taking it touches only
    /// the slot, which the job has to reach anyway, not the idle list both sides would pass
    /// back and forth between processors.
    static WARM: std::cell::RefCell<Option<(std::sync::Weak<Shared>, Arc<Slot>)>> =
        const { std::cell::RefCell::new(None) };
}

struct Shared {
    /// Idle threads, the most recently used last (the warmest is taken first); may also hold
    /// busy ones a caller took from its warm cache ([`Slot::listed`]).
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

    /// Runs `job` on an idle thread, or on a new one while the pool is under its bound; `at`:
    /// when the caller handed it over (a clock read the caller makes anyway), from which the
    /// thread tells a burst of calls from sparse ones.
    pub(crate) fn run(&self, job: Job, at: Instant) -> Result<Ticket, Refused> {
        if let Some((slot, state)) = self.warm().or_else(|| self.take_from_list()) {
            // Taken: only this caller touches its job until the job is in.
            *lock(&slot.job) = Some((job, at));
            // Sequentially consistent with the thread's `sleeping`, then `posted` (`sleep`):
            // either this caller sees it going to sleep and wakes it, or it sees the job.
            slot.posted.store(true, Ordering::SeqCst);
            if slot.sleeping.load(Ordering::SeqCst) {
                unpark(&slot);
            }
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
        let slot = start(&self.shared, Some((job, at))).inspect_err(|_| {
            self.shared.live.fetch_sub(1, Ordering::AcqRel);
        })?;
        self.remember(&slot);
        Ok(Ticket { slot, state: BUSY })
    }

    /// The calling thread's warm slot, if it belongs to this pool and is idle.
    fn warm(&self) -> Option<(Arc<Slot>, u64)> {
        WARM.with_borrow(|warm| {
            let (pool, slot) = warm.as_ref()?;
            if !std::ptr::eq(pool.as_ptr(), Arc::as_ptr(&self.shared)) {
                return None;
            }
            slot.claim().map(|state| (slot.clone(), state))
        })
    }

    /// The warmest idle thread of the list, taken off it (busy ones taken from warm caches
    /// stay; their threads are listed already).
    fn take_from_list(&self) -> Option<(Arc<Slot>, u64)> {
        let mut idle = lock(&self.shared.idle);
        let (i, state) = idle.iter().enumerate().rev().find_map(|(i, slot)| slot.claim().map(|state| (i, state)))?;
        let slot = idle.remove(i);
        slot.listed.store(false, Ordering::Release);
        drop(idle);
        self.remember(&slot);
        Some((slot, state))
    }

    /// Makes `slot` the calling thread's warm slot.
    fn remember(&self, slot: &Arc<Slot>) {
        WARM.with_borrow_mut(|warm| *warm = Some((Arc::downgrade(&self.shared), slot.clone())));
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
        let idle = lock(&self.shared.idle).iter().filter(|s| s.state.load(Ordering::Acquire) & MASK == IDLE).count();
        (self.shared.live.load(Ordering::Acquire), idle)
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
fn start(shared: &Arc<Shared>, job: Option<(Job, Instant)>) -> Result<Arc<Slot>, Refused> {
    let busy = job.is_some();
    let slot = Arc::new(Slot {
        job: Mutex::new(job),
        posted: AtomicBool::new(busy),
        sleeping: AtomicBool::new(false),
        state: AtomicU64::new(if busy { BUSY } else { IDLE }),
        listed: AtomicBool::new(false),
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
        list(shared, &slot);
    }
    Ok(slot)
}

/// A pool thread: runs jobs until it is retired, the pool is dropped, or it idled for
/// [`KEEP_ALIVE`].
fn serve(shared: &Shared, slot: &Arc<Slot>) {
    // When the current idle stretch began (wake-ups without a job are normal: a stale
    // `unpark` token, or one that raced the job's arrival).
    let mut idle_since: Option<Instant> = None;
    // When the thread last became idle, and whether its last job came soon enough after that
    // to make a burst ([`is_burst`]: it spins for the next one).
    let (mut idle_at, mut burst) = (Instant::now(), false);
    loop {
        let job = if slot.posted.load(Ordering::Acquire) { lock(&slot.job).take() } else { None };
        let Some((job, handed)) = job else {
            if burst && idle_since.is_none() {
                // Waits for the next job of a burst without sleeping (once per idle stretch).
                burst = false;
                if can_spin() && spin_until(idle_at + IDLE_SPIN, || slot.posted.load(Ordering::Acquire)) {
                    continue;
                }
            }
            if slot.state.load(Ordering::Acquire) & MASK != IDLE {
                // Taken by a caller whose job is on its way.
                sleep(slot, None);
                continue;
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            let left = KEEP_ALIVE.saturating_sub(since.elapsed());
            if (shared.closing.load(Ordering::Acquire) || left.is_zero()) && leave(shared, slot) {
                return;
            }
            sleep(slot, Some(left.max(Duration::from_millis(1))));
            continue;
        };
        slot.posted.store(false, Ordering::Relaxed);
        // The caller's cadence: from the thread becoming idle to the caller handing the job
        // over, not to the thread seeing it (a thread that slept would count its own wake-up,
        // and on a slow-waking machine every later gap would then look sparse).
        burst = is_burst(handed.saturating_duration_since(idle_at));
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
            idle_at = Instant::now();
            // Still listed when its caller took it from a warm cache.
            if !slot.listed.load(Ordering::Acquire) {
                list(shared, slot);
            }
        }
        if ran {
            job.answer();
        } else {
            drop(job);
        }
        if retired || closing {
            // Retired while it ran (its place was already given to a new thread), or the
            // pool is gone; off the list if a caller took it from a warm cache while listed.
            if slot.listed.load(Ordering::Acquire) {
                unlist(shared, slot);
            }
            return;
        }
    }
}

/// Sleeps until a caller posts a job (or `timeout` passes, or a stale wake-up token or the
/// pool's drop wakes the thread: the caller's loop checks again).
fn sleep(slot: &Slot, timeout: Option<Duration>) {
    slot.sleeping.store(true, Ordering::SeqCst);
    if !slot.posted.load(Ordering::SeqCst) {
        match timeout {
            Some(t) => std::thread::park_timeout(t),
            None => std::thread::park(),
        }
    }
    slot.sleeping.store(false, Ordering::Relaxed);
}

/// Whether a job handed over `gap` after its thread became idle belongs to a burst (the
/// thread then spins for the next one, up to [`IDLE_SPIN`] after it is listed again).
fn is_burst(gap: Duration) -> bool {
    gap <= IDLE_SPIN / 2
}

/// Puts an idle thread's slot on the pool's idle list.
fn list(shared: &Shared, slot: &Arc<Slot>) {
    let mut idle = lock(&shared.idle);
    if !slot.listed.swap(true, Ordering::AcqRel) {
        idle.push(slot.clone());
    }
}

/// Leaves the pool if the thread is still idle (nobody took it in the meantime); false when a
/// job is on its way.
fn leave(shared: &Shared, slot: &Arc<Slot>) -> bool {
    let now = slot.state.load(Ordering::Acquire);
    let left = (now & !MASK) | LEFT;
    if now & MASK != IDLE || slot.state.compare_exchange(now, left, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return false;
    }
    unlist(shared, slot);
    shared.live.fetch_sub(1, Ordering::AcqRel);
    true
}

/// Takes a thread that ends off the idle list, if it is on it.
fn unlist(shared: &Shared, slot: &Arc<Slot>) {
    let mut idle = lock(&shared.idle);
    if let Some(i) = idle.iter().position(|s| Arc::ptr_eq(s, slot)) {
        idle.remove(i);
        slot.listed.store(false, Ordering::Release);
    }
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
            pool.run(probe(n, &done), Instant::now()).expect("taken");
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
        let ticket = pool.run(stuck, Instant::now()).expect("taken");
        assert!(matches!(pool.run(probe(2, &done), Instant::now()), Err(Refused::Full(1))));
        // The caller gave up: a new thread takes the stuck one's place.
        pool.retire(&ticket);
        assert_eq!(pool.threads(), (1, 1));
        pool.run(probe(3, &done), Instant::now()).expect("the replacement takes work");
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
        let first = pool.run(probe(1, &done), Instant::now()).expect("taken");
        assert_eq!(answers.recv_timeout(WAIT), Ok(1));
        let (next, release) = gated(2, &done);
        let _second = pool.run(next, Instant::now()).expect("the same thread");
        pool.retire(&first);
        // Still one thread, busy with the second call: nothing was started in its place.
        assert_eq!(pool.threads(), (1, 0));
        assert!(matches!(pool.run(probe(3, &done), Instant::now()), Err(Refused::Full(1))));
        release.send(()).expect("release");
        assert_eq!(answers.recv_timeout(WAIT), Ok(2));
    }

    #[test]
    fn a_callers_warm_thread_is_taken_in_place_and_leaves_the_list_when_retired() {
        let pool = Pool::new(2);
        let (done, answers) = mpsc::channel();
        pool.run(probe(1, &done), Instant::now()).expect("taken");
        assert_eq!(answers.recv_timeout(WAIT), Ok(1));
        let listed = || lock(&pool.shared.idle).len();
        let started = Instant::now();
        while pool.threads() != (1, 1) && started.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!((pool.threads(), listed()), ((1, 1), 1));
        // Taken from this thread's warm cache: busy, and still on the list (not taken off it).
        let (stuck, release) = gated(2, &done);
        let ticket = pool.run(stuck, Instant::now()).expect("the warm thread");
        assert_eq!((pool.threads(), listed()), ((1, 0), 1));
        // Retired: a new idle thread takes its place; the stuck one leaves the list when its
        // job returns.
        pool.retire(&ticket);
        assert_eq!((pool.threads(), listed()), ((1, 1), 2));
        release.send(()).expect("release");
        assert_eq!(answers.recv_timeout(WAIT), Ok(2));
        let started = Instant::now();
        while listed() != 1 && started.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!((pool.threads(), listed()), ((1, 1), 1));
        // The new thread serves the next call (taken off the list: it was not warm here).
        pool.run(probe(3, &done), Instant::now()).expect("the new thread");
        assert_eq!(answers.recv_timeout(WAIT), Ok(3));
    }

    /// A job that sends the id of the thread running it (`/proc/thread-self` names it).
    struct WhichThread(mpsc::Sender<String>);

    impl Work for WhichThread {
        fn run(&mut self) {}
        fn answer(self: Box<Self>) {
            let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
            let _ = self.0.send(link.file_name().expect("a thread id").to_string_lossy().into_owned());
        }
    }

    /// The scheduler state of thread `tid` of this process (`R` running, `S` sleeping, ...).
    fn thread_state(tid: &str) -> char {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("the thread's stat");
        // After the command name in parentheses, which may itself hold spaces.
        stat[stat.rfind(')').expect("stat format") + 2..].chars().next().expect("a state")
    }

    #[test]
    fn a_thread_spins_only_briefly_after_a_burst_and_then_sleeps() {
        let pool = Pool::new(1);
        let (tx, rx) = mpsc::channel();
        // Back-to-back calls: between them the thread may spin for the next one.
        let mut tid = String::new();
        for _ in 0..500 {
            pool.run(Box::new(WhichThread(tx.clone())), Instant::now()).expect("taken");
            tid = rx.recv_timeout(WAIT).expect("answered");
        }
        assert_eq!(pool.threads(), (1, 1), "one thread served the whole burst");
        // Once the burst ends, the thread sleeps within IDLE_SPIN (polled for far longer, since
        // the test machine may be busy).
        let started = Instant::now();
        while thread_state(&tid) != 'S' && started.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(thread_state(&tid), 'S', "the pool thread still runs {:?} after its last job", started.elapsed());
        // And a call to a sleeping thread is still taken at once.
        pool.run(Box::new(WhichThread(tx)), Instant::now()).expect("taken");
        assert_eq!(rx.recv_timeout(WAIT).as_deref(), Ok(tid.as_str()));
    }

    /// How many times thread `tid` of this process went to sleep so far, and how many times the
    /// system took the processor from it (its voluntary and involuntary context switches).
    fn switches(tid: &str) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).expect("the thread's status");
        let count = |key: &str| {
            let line = status.lines().find(|l| l.starts_with(key)).expect("a switch count");
            line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number")
        };
        (count("voluntary_ctxt_switches:"), count("nonvoluntary_ctxt_switches:"))
    }

    #[test]
    fn a_hand_over_touches_one_cache_line() {
        // The hot fields end within the slot's first line, which starts a line.
        let job_end = std::mem::offset_of!(Slot, job) + std::mem::size_of::<Mutex<Option<(Job, Instant)>>>();
        assert!(job_end <= 64, "the job ends at byte {job_end}");
        assert!(std::mem::offset_of!(Slot, listed) < std::mem::offset_of!(Slot, job));
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    #[test]
    fn a_job_after_a_slow_wake_up_still_makes_a_burst() {
        // 25-30 µs: a caller's wake-up on a slow-waking 2-vCPU machine, plus its pipeline.
        assert!(is_burst(Duration::from_micros(35)));
        assert!(!is_burst(Duration::from_micros(60)), "sparse calls do not make the thread spin");
        assert!(IDLE_SPIN >= SPIN);
    }

    /// A caller that slept and woke slowly sends its next job 25-30 µs after the last answer on
    /// a slow-waking machine: the pool thread must still be spinning then, or it sleeps after
    /// every job and each handoff pays a wake-up on both sides (the cascade `IDLE_SPIN` is for).
    #[test]
    fn a_thread_stays_awake_through_gaps_as_long_as_a_slow_wake_up() {
        if !can_spin() {
            return;
        }
        const JOBS: u64 = 300;
        // The sleeps of a fresh pool's thread over one burst of jobs 30 µs apart.
        let burst = || {
            let pool = Pool::new(1);
            let (tx, rx) = mpsc::channel();
            let call = || {
                pool.run(Box::new(WhichThread(tx.clone())), Instant::now()).expect("taken");
                // Waits for the answer without sleeping, as a spinning caller does.
                let started = Instant::now();
                loop {
                    match rx.try_recv() {
                        Ok(tid) => return tid,
                        Err(_) if started.elapsed() < WAIT => std::hint::spin_loop(),
                        Err(e) => panic!("no answer: {e}"),
                    }
                }
            };
            let tid = call();
            let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
            let caller = link.file_name().expect("a thread id").to_string_lossy().into_owned();
            let (before, caller_before) = (switches(&tid), switches(&caller));
            for _ in 0..JOBS {
                // The caller's slow wake-up, as a gap before its next job.
                spin_until(Instant::now() + Duration::from_micros(30), || false);
                assert_eq!(call(), tid, "one thread serves the whole burst");
            }
            let (after, caller_after) = (switches(&tid), switches(&caller));
            (after.0 - before.0, after.1 - before.1 + caller_after.1 - caller_before.1)
        };
        // A busy machine (other tests on every core) takes the processor from either thread, or
        // runs both on one core, and then the pool thread rightly stops spinning: such a burst
        // says nothing, so up to ten are tried and the first with fewer than ten preemptions (a
        // quiet machine has one to five) decides. A window shorter than the gap sleeps after
        // every job: 300 times.
        for _ in 0..10 {
            let (slept, preempted) = burst();
            if preempted < JOBS / 30 {
                assert!(slept < JOBS / 10, "the pool thread slept {slept} times in {JOBS} jobs 30 µs apart");
                return;
            }
        }
        eprintln!("every burst was preempted (a saturated machine): only `is_burst` was checked");
    }

    #[test]
    fn callers_spin_only_for_tools_that_answered_fast_lately() {
        let hint = SpinHint::default();
        // A tool's first call may spin (where more than one CPU can run).
        assert_eq!(hint.budget(), can_spin().then_some(SPIN));
        hint.record(Duration::from_millis(5));
        assert_eq!(hint.budget(), None, "one slow call stops the spinning");
        let mut fast_calls = 0;
        while hint.budget().is_none() && fast_calls < 100 {
            hint.record(Duration::from_micros(1));
            fast_calls += 1;
        }
        if can_spin() {
            assert!((5..=20).contains(&fast_calls), "{fast_calls} fast calls brought the spinning back");
        }
        // Spins that end without an answer: one leaves spinning on, three in a row stop it.
        for _ in 0..5 {
            hint.record(Duration::from_micros(1));
        }
        hint.missed();
        assert_eq!(hint.budget(), can_spin().then_some(SPIN), "one spin in vain");
        hint.missed();
        hint.missed();
        assert_eq!(hint.budget(), None, "three spins in vain stop the spinning");
        let mut fast_calls = 0;
        while hint.budget().is_none() && fast_calls < 100 {
            hint.record(Duration::from_micros(1));
            fast_calls += 1;
        }
        if can_spin() {
            assert!(
                (1..=10).contains(&fast_calls),
                "{fast_calls} fast calls brought the spinning back after the misses"
            );
        }
        // A call that ran for longer than the counter holds counts as the longest.
        hint.record(Duration::from_secs(3600));
        assert_eq!(hint.budget(), None);
    }

    #[test]
    fn a_panicking_job_drops_its_answer_and_the_thread_keeps_serving() {
        let pool = Pool::new(1);
        let (done, answers) = mpsc::channel();
        pool.run(Box::new(Probe { go: None, panic: true, n: 1, done: done.clone() }), Instant::now()).expect("taken");
        // The panicking job's thread is busy until its panic is reported, then idle again.
        let started = std::time::Instant::now();
        while let Err(refused) = pool.run(probe(2, &done), Instant::now()) {
            assert!(matches!(refused, Refused::Full(1)), "{refused:?}");
            assert!(started.elapsed() < WAIT, "the thread did not come back after the panic");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(answers.recv_timeout(WAIT), Ok(2), "the panicked job sent no answer");
        assert_eq!(pool.threads().0, 1);
    }
}
