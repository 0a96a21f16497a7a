//! An explicit, persistent thread pool (no global state): `threads - 1` workers plus the
//! calling thread split each parallel region into a fixed list of tasks. Work is divided by
//! output rows or tiles only, never inside a reduction, so results do not depend on the
//! thread count.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::error::{Error, Result};

type TaskFn = dyn Fn(usize) + Sync;

/// The most threads a pool runs. Far above any CPU kinema targets; a bound so that a typo
/// (`--threads 100000`) is refused up front instead of exhausting process or memory limits.
pub const MAX_THREADS: usize = 1024;

/// `n` if it lies in `1..=MAX_THREADS`, else an error naming `what`.
pub fn validate_threads(n: usize, what: &str) -> Result<usize> {
    if (1..=MAX_THREADS).contains(&n) {
        Ok(n)
    } else {
        Err(Error::InvalidArgument(format!(
            "{what} must be from 1 to {MAX_THREADS}, got {n}"
        )))
    }
}

fn parse_count(s: &str) -> std::result::Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a whole number of threads from 1 to {MAX_THREADS}"))?;
    if (1..=MAX_THREADS).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n} threads: expected 1 to {MAX_THREADS}"))
    }
}

#[derive(Clone, Copy)]
struct Job {
    f: *const TaskFn,
    tasks: usize,
    next: *const AtomicUsize,
}

// SAFETY: a Job's pointers refer to data owned by the `run` call that published it. A worker
// dereferences them only after entering the job (a successful compare-exchange on
// `Inner::state` while the job is open), and `run` closes the job and then waits for every
// worker that entered to finish before it returns.
unsafe impl Send for Job {}

struct Slot {
    generation: u64,
    job: Option<Job>,
    panic: Option<Box<dyn std::any::Any + Send>>,
    shutdown: bool,
}

struct Inner {
    slot: Mutex<Slot>,
    start: Condvar,
    done: Condvar,
    /// Mirror of `Slot::generation`, read without the lock while spinning.
    generation: AtomicU64,
    /// The current job's admission word: the low 32 bits of its generation, the CLOSED bit
    /// and the number of workers that entered it. A worker enters only while the job is
    /// open; the caller closes it when its own share is done and then waits only for the
    /// workers that entered, so a worker the OS has not scheduled yet costs nothing.
    state: AtomicU64,
    /// Workers that entered the current job and finished it.
    finished: AtomicUsize,
}

const CLOSED: u64 = 1 << 31;
const ENTERED: u64 = CLOSED - 1;

/// How long a thread spins on the atomics before it parks on a condition variable. Waking a
/// parked thread costs tens of microseconds on a VM, more than many kernels take, so back-to-
/// back ops of a graph should find their workers still spinning; idle workers park soon after.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Spin until `ready()` or `SPIN` has passed; true if it became ready.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= SPIN {
            return ready();
        }
    }
}

/// A fixed set of worker threads that runs parallel regions (see the module comment).
pub struct ThreadPool {
    inner: Arc<Inner>,
    workers: Vec<JoinHandle<()>>,
    region: Mutex<()>,
}

thread_local! {
    static IN_REGION: Cell<bool> = const { Cell::new(false) };
}

impl ThreadPool {
    /// A pool that runs parallel regions on `threads` threads (the caller included); 0 counts
    /// as 1. For tests and benches with small fixed counts.
    ///
    /// # Panics
    ///
    /// If the operating system refuses a worker thread or `threads` is above
    /// [`MAX_THREADS`]. Where the count comes from a user, use [`ThreadPool::try_new`].
    pub fn new(threads: usize) -> ThreadPool {
        match ThreadPool::try_new(threads.max(1)) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    /// A pool that runs parallel regions on `threads` threads (the caller included), or an
    /// error when `threads` is outside `1..=MAX_THREADS` or the operating system refuses a
    /// worker thread (a process or memory limit); the workers already started are joined.
    pub fn try_new(threads: usize) -> Result<ThreadPool> {
        let threads = validate_threads(threads, "the thread count")?;
        let inner = Arc::new(Inner {
            slot: Mutex::new(Slot {
                generation: 0,
                job: None,
                panic: None,
                shutdown: false,
            }),
            start: Condvar::new(),
            done: Condvar::new(),
            generation: AtomicU64::new(0),
            state: AtomicU64::new(CLOSED),
            finished: AtomicUsize::new(0),
        });
        // Built up in place so that on a refused spawn, dropping the pool shuts down and
        // joins the workers started so far.
        let mut pool = ThreadPool {
            inner,
            workers: Vec::with_capacity(threads - 1),
            region: Mutex::new(()),
        };
        // Each worker says it is up before the next is spawned: its start-up (the runtime's
        // thread-local set-up, which allocates) is over before the next stack takes address
        // space, so a memory limit refuses a spawn (an error) instead of failing a started
        // thread's allocation (glibc aborts the process there).
        for i in 1..threads {
            let inner = pool.inner.clone();
            let (up, started) = std::sync::mpsc::channel::<()>();
            let worker = std::thread::Builder::new()
                .name(format!("kinema-cpu-{i}"))
                .spawn(move || {
                    // try_new waits for this (its receiver is alive until then).
                    let _ = up.send(());
                    drop(up);
                    worker(&inner)
                })
                .map_err(|e| Error::Backend {
                    backend: "cpu",
                    msg: format!(
                        "cannot start worker thread {i} of {}: {e}; ask for fewer threads \
                         (--threads or KINEMA_THREADS)",
                        threads - 1
                    ),
                })?;
            pool.workers.push(worker);
            // The worker's sender is its only one: were it gone without a word, recv returns.
            let _ = started.recv();
        }
        Ok(pool)
    }

    /// Threads from `KINEMA_THREADS`, else `available_parallelism` (at most
    /// [`MAX_THREADS`]). A `KINEMA_THREADS` that is not a whole number in `1..=MAX_THREADS`
    /// is an error naming the variable, never silently ignored.
    pub fn default_threads() -> Result<usize> {
        match std::env::var("KINEMA_THREADS") {
            Ok(v) => parse_count(&v)
                .map_err(|why| Error::InvalidArgument(format!("KINEMA_THREADS={v:?}: {why}"))),
            Err(std::env::VarError::NotUnicode(v)) => Err(Error::InvalidArgument(format!(
                "KINEMA_THREADS={v:?}: not valid UTF-8"
            ))),
            Err(std::env::VarError::NotPresent) => Ok(std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(MAX_THREADS)),
        }
    }

    /// Parse a `--threads` value (for the command line's argument parser): a whole number in
    /// `1..=MAX_THREADS`, with a message saying why not.
    pub fn parse_threads(s: &str) -> std::result::Result<usize, String> {
        parse_count(s)
    }

    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Call `f(i)` for every `i < tasks`, spread over the pool; returns when all are done.
    /// A region started from inside a region runs serially on the calling thread.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if tasks == 0 {
            return;
        }
        if self.workers.is_empty() || tasks == 1 || IN_REGION.with(|r| r.get()) {
            for i in 0..tasks {
                f(i);
            }
            return;
        }
        let _region = self.region.lock().unwrap_or_else(|e| e.into_inner());
        let next = AtomicUsize::new(0);
        // SAFETY: erase the borrow's lifetime; the job is closed to new workers and every
        // worker that entered it has finished before this function returns (see below).
        let f_static: *const TaskFn =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static TaskFn>(f) };
        let job = Job {
            f: f_static,
            tasks,
            next: &next,
        };
        {
            let mut s = self.inner.slot.lock().unwrap_or_else(|e| e.into_inner());
            s.job = Some(job);
            s.generation += 1;
            self.inner.finished.store(0, Ordering::Relaxed);
            self.inner
                .state
                .store(gen_tag(s.generation), Ordering::Release);
            self.inner.generation.store(s.generation, Ordering::Release);
        }
        // Outside the lock, so a parked worker that wakes does not wait for it.
        self.inner.start.notify_all();
        IN_REGION.with(|r| r.set(true));
        let mine = catch_unwind(AssertUnwindSafe(|| run_tasks(job)));
        IN_REGION.with(|r| r.set(false));
        // Close the job: no worker enters from now on; wait for those that did.
        let entered = (self.inner.state.fetch_or(CLOSED, Ordering::AcqRel) & ENTERED) as usize;
        if entered == 0 {
            // No worker came in time (the caller did every task): nothing to wait for, and no
            // worker can enter or reach the job's pointers any more.
            if let Err(p) = mine {
                resume_unwind(p);
            }
            return;
        }
        spin_until(|| self.inner.finished.load(Ordering::Acquire) == entered);
        let mut s = self.inner.slot.lock().unwrap_or_else(|e| e.into_inner());
        while self.inner.finished.load(Ordering::Acquire) < entered {
            s = self.inner.done.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.job = None;
        let theirs = s.panic.take();
        drop(s);
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if let Some(p) = theirs {
            resume_unwind(p);
        }
    }

    /// Split `out` into chunks of `chunk` elements (the last may be shorter) and call
    /// `f(chunk_index, chunk)` for each, in parallel.
    pub fn par_chunks_mut<T: Send>(
        &self,
        out: &mut [T],
        chunk: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        let chunk = chunk.max(1);
        let len = out.len();
        let tasks = len.div_ceil(chunk);
        let base = SendPtr(out.as_mut_ptr());
        self.run(tasks, &|i| {
            let start = i * chunk;
            let n = chunk.min(len - start);
            // SAFETY: chunk i covers [i*chunk, i*chunk+n), disjoint from every other
            // chunk and inside `out`, which is exclusively borrowed for this call.
            let part = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), n) };
            f(i, part);
        });
    }
}

/// A raw pointer that may cross threads; users guarantee disjoint access.
pub struct SendPtr<T>(pub *mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used to hand disjoint sub-slices to pool tasks (see par_chunks_mut).
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    pub fn get(self) -> *mut T {
        self.0
    }
}

fn run_tasks(job: Job) {
    // SAFETY: the publisher keeps `f` and `next` alive until it has run its own share and
    // every worker that entered the job (see `enter`) has finished.
    let (f, next) = unsafe { (&*job.f, &*job.next) };
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= job.tasks {
            break;
        }
        f(i);
    }
}

fn worker(inner: &Inner) {
    let mut seen = 0u64;
    loop {
        spin_until(|| inner.generation.load(Ordering::Acquire) != seen);
        let job = {
            let mut s = inner.slot.lock().unwrap_or_else(|e| e.into_inner());
            while s.generation == seen && !s.shutdown {
                s = inner.start.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            if s.shutdown {
                return;
            }
            seen = s.generation;
            s.job
        };
        // Enter the job while it is open; a job already closed (its caller did every task
        // before this worker woke) or replaced is skipped without touching its pointers.
        let Some(job) = job.filter(|_| enter(inner, seen)) else {
            continue;
        };
        IN_REGION.with(|r| r.set(true));
        let result = catch_unwind(AssertUnwindSafe(|| run_tasks(job)));
        IN_REGION.with(|r| r.set(false));
        let mut s = inner.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(p) = result {
            s.panic.get_or_insert(p);
        }
        // Under the lock, so a caller that checked `finished` under it cannot miss the wake.
        inner.finished.fetch_add(1, Ordering::AcqRel);
        inner.done.notify_all();
    }
}

/// The admission word of an open job of generation `generation`, no worker entered yet.
fn gen_tag(generation: u64) -> u64 {
    (generation & u64::from(u32::MAX)) << 32
}

/// Count this worker into the job of `generation` if that job is still open.
fn enter(inner: &Inner, generation: u64) -> bool {
    let tag = gen_tag(generation);
    let mut cur = inner.state.load(Ordering::Acquire);
    loop {
        if cur & !(CLOSED | ENTERED) != tag || cur & CLOSED != 0 {
            return false;
        }
        match inner
            .state
            .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return true,
            Err(now) => cur = now,
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        {
            let mut s = self.inner.slot.lock().unwrap_or_else(|e| e.into_inner());
            s.shutdown = true;
            self.inner.start.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_task_runs_once() {
        for threads in [1, 2, 3] {
            let pool = ThreadPool::new(threads);
            for tasks in [0, 1, 2, 7, 100] {
                let hits: Vec<AtomicU64> = (0..tasks).map(|_| AtomicU64::new(0)).collect();
                pool.run(tasks, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn chunks_cover_the_slice_and_nested_regions_run() {
        let pool = ThreadPool::new(2);
        let mut v = vec![0usize; 103];
        pool.par_chunks_mut(&mut v, 10, |i, c| {
            let inner_sum = AtomicU64::new(0);
            pool.run(3, &|j| {
                inner_sum.fetch_add(j as u64, Ordering::Relaxed);
            });
            for x in c.iter_mut() {
                *x = i + inner_sum.load(Ordering::Relaxed) as usize;
            }
        });
        for (k, x) in v.iter().enumerate() {
            assert_eq!(*x, k / 10 + 3);
        }
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_pool_survives() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(8, &|i| {
                if i == 5 {
                    panic!("task 5");
                }
            })
        }));
        assert!(r.is_err());
        let n = AtomicU64::new(0);
        pool.run(4, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn thread_counts_outside_the_range_are_refused() {
        for bad in [0, MAX_THREADS + 1, usize::MAX] {
            let e = ThreadPool::try_new(bad).err().expect("refused");
            assert!(e.to_string().contains("from 1 to 1024"), "{e}");
        }
        assert_eq!(ThreadPool::try_new(3).unwrap().threads(), 3);
        assert_eq!(ThreadPool::parse_threads(" 8 "), Ok(8));
        assert_eq!(ThreadPool::parse_threads("1024"), Ok(1024));
        for bad in ["0", "1025", "-1", "abc", "", "1.5"] {
            assert!(ThreadPool::parse_threads(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn back_to_back_regions_with_late_and_parked_workers() {
        // Regions of every size, back to back (workers spinning, or not scheduled in time and
        // skipping closed jobs) and after pauses longer than the spin (workers parked).
        let pool = ThreadPool::new(3);
        let total = AtomicU64::new(0);
        let mut want = 0u64;
        for round in 0..3000u64 {
            let tasks = (round % 9) as usize;
            let hits: Vec<AtomicU64> = (0..tasks).map(|_| AtomicU64::new(0)).collect();
            pool.run(tasks, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
                total.fetch_add(1, Ordering::Relaxed);
            });
            want += tasks as u64;
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            if round % 500 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        assert_eq!(total.load(Ordering::Relaxed), want);
    }
}
