//! Work spread over the host's cores while a model loads (finite scans, narrowing weights in
//! memory): scoped threads taking items in turn from a shared counter. Results come back in
//! item order and each item is computed alone, so nothing depends on the thread count.

use std::panic::resume_unwind;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Threads a load uses at most: beyond this the memory bus, not the cores, limits a scan.
pub const MAX_LOAD_THREADS: usize = 16;

/// `f` of every item, in item order, on up to [`MAX_LOAD_THREADS`] threads (the host's
/// available parallelism). A panic in `f` is raised again here.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_LOAD_THREADS)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return done;
                        };
                        done.push((i, f(item)));
                    }
                })
            })
            .collect();
        for w in workers {
            for (i, r) in w.join().unwrap_or_else(|e| resume_unwind(e)) {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter()
        .map(|r| r.expect("every item was taken by a worker"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_item_in_order() {
        let items: Vec<u64> = (0..1000).collect();
        let out = par_map(&items, |&x| x * x + 1);
        assert_eq!(out, items.iter().map(|x| x * x + 1).collect::<Vec<_>>());
        assert!(par_map(&[] as &[u8], |&x| x).is_empty());
        assert_eq!(par_map(&[7u8], |&x| x + 1), vec![8]);
    }

    #[test]
    fn raises_a_worker_panic_again() {
        let items: Vec<u32> = (0..64).collect();
        let r = std::panic::catch_unwind(|| {
            par_map(&items, |&x| {
                assert!(x != 40, "item forty");
                x
            })
        });
        assert!(r.is_err());
    }
}
