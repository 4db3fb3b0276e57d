//! [`ToolThreads`]: the dedicated threads that run thread-execution tools.
//!
//! Why not `tokio::task::spawn_blocking`: its pool is shared with everything else that blocks
//! and parks an idle thread at once, so each call paid a wake-up of a sleeping thread (15-40 µs
//! on a busy host). Here a thread that finished a call spins for a short while ([`SPIN`])
//! watching for the next one before it sleeps, so calls that follow each other are handed over
//! through one atomic counter; a sleeping thread is woken only when no thread is spinning, and a
//! new thread is started only when every thread is busy. Threads that stay idle for [`IDLE`]
//! exit. The number of threads is bounded by the caller (the router's host-wide call slots).
//!
//! The pool knows nothing of deadlines: the router waits for the job's answer with the call's
//! deadline and cancellation token beside it, so a hung tool still gets its caller a `timeout`
//! at the deadline (its thread stays busy until the tool returns).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a thread that ran out of work watches for more before it sleeps.
pub const SPIN: Duration = Duration::from_micros(50);
/// How long a sleeping thread waits for work before it exits.
pub const IDLE: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Threads alive.
    threads: usize,
    /// Threads looking for work (spinning or sleeping).
    idle: usize,
}

struct Inner {
    state: Mutex<State>,
    available: Condvar,
    /// Jobs queued (mirrors `state.queue.len()`, read by spinning threads without the lock).
    queued: AtomicUsize,
    /// Threads spinning right now.
    spinning: AtomicUsize,
    max_threads: usize,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A pool of threads for calls that may block. Cheap to clone (shared).
#[derive(Clone)]
pub struct ToolThreads {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ToolThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.lock();
        f.debug_struct("ToolThreads").field("threads", &st.threads).field("idle", &st.idle).finish()
    }
}

impl ToolThreads {
    /// A pool of at most `max_threads` threads (at least 1), none started yet.
    pub fn new(max_threads: usize) -> ToolThreads {
        ToolThreads {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                available: Condvar::new(),
                queued: AtomicUsize::new(0),
                spinning: AtomicUsize::new(0),
                max_threads: max_threads.max(1),
            }),
        }
    }

    /// Runs `job` on a pool thread. The job must not panic across this call (the router's jobs
    /// call a plugin backend, which never unwinds); a panicking job ends its thread only.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        let inner = &self.inner;
        let mut st = inner.lock();
        st.queue.push_back(Box::new(job));
        inner.queued.fetch_add(1, SeqCst);
        let start = st.queue.len() > st.idle && st.threads < inner.max_threads;
        if start {
            st.threads += 1;
        }
        drop(st);
        if start {
            let pool = self.inner.clone();
            let spawned = std::thread::Builder::new().name("quiver-tool".into()).spawn(move || work(&pool));
            if let Err(e) = spawned {
                // The job stays queued for a thread that exists; with none, its caller still
                // gets its timeout at the deadline.
                inner.lock().threads -= 1;
                tracing::error!(error = %e, "cannot start a thread for tool calls");
            }
        } else if inner.spinning.load(SeqCst) == 0 {
            inner.available.notify_one();
        }
    }
}

/// A pool thread: runs jobs, spins for [`SPIN`] when out of work, then sleeps up to [`IDLE`].
fn work(inner: &Inner) {
    let mut st = inner.lock();
    loop {
        if let Some(job) = st.queue.pop_front() {
            inner.queued.fetch_sub(1, SeqCst);
            drop(st);
            job();
            st = inner.lock();
            continue;
        }
        st.idle += 1;
        drop(st);
        inner.spinning.fetch_add(1, SeqCst);
        let until = Instant::now() + SPIN;
        while inner.queued.load(SeqCst) == 0 && Instant::now() < until {
            std::hint::spin_loop();
        }
        inner.spinning.fetch_sub(1, SeqCst);
        st = inner.lock();
        if st.queue.is_empty() {
            let (guard, waited) =
                inner.available.wait_timeout_while(st, IDLE, |s| s.queue.is_empty()).unwrap_or_else(|e| e.into_inner());
            st = guard;
            if waited.timed_out() && st.queue.is_empty() {
                st.idle -= 1;
                st.threads -= 1;
                return;
            }
        }
        st.idle -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn runs_every_job_and_starts_threads_only_when_all_are_busy() {
        let pool = ToolThreads::new(4);
        let (tx, rx) = mpsc::channel();
        for i in 0..100 {
            let tx = tx.clone();
            pool.run(move || tx.send(i).unwrap());
        }
        let mut got: Vec<i32> = (0..100).map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        assert!(pool.inner.lock().threads <= 4);

        // A blocked job does not hold up the next: another thread takes it.
        let (release, blocked) = mpsc::channel::<()>();
        pool.run(move || blocked.recv().unwrap());
        let (tx2, rx2) = mpsc::channel();
        pool.run(move || tx2.send(()).unwrap());
        rx2.recv_timeout(Duration::from_secs(10)).expect("the second job ran beside the blocked one");
        release.send(()).unwrap();
    }

    #[test]
    fn a_pool_of_one_runs_jobs_in_turn() {
        let pool = ToolThreads::new(1);
        let (tx, rx) = mpsc::channel();
        for i in 0..10 {
            let tx = tx.clone();
            pool.run(move || {
                std::thread::sleep(Duration::from_millis(1));
                tx.send(i).unwrap()
            });
        }
        let got: Vec<i32> = (0..10).map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert_eq!(pool.inner.lock().threads, 1);
    }
}
