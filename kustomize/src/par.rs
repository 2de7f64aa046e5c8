//! A small ordered parallel map for the engine's independent, CPU-heavy pieces of work
//! (parsing the resource files of a kustomization, printing a large stream).
//!
//! Scoped threads, started per call: the work items are milliseconds long, and a build
//! already runs on a blocking thread of its own in the controller. A thread that cannot be
//! started, or that panics, leaves its items to the calling thread.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The most threads one call uses (the calling thread included).
pub(crate) const MAX_THREADS: usize = 4;

/// How many threads a call may use on this machine: at most [`MAX_THREADS`], 1 when the
/// parallelism cannot be known.
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
}

/// `items.iter().map(f).collect()`, computed on up to `threads` threads, in input order.
pub(crate) fn map_ordered<T, R, F>(items: &[T], threads: usize, f: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    F: Fn(&T) -> R + Sync,
{
    if threads < 2 || items.len() < 2 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            done.push((i, f(item)));
        }
        done
    };
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads.min(items.len()))
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, work).ok())
            .collect();
        for (i, r) in work() {
            slots[i] = Some(r);
        }
        for h in helpers {
            for (i, r) in h.join().unwrap_or_default() {
                slots[i] = Some(r);
            }
        }
    });
    slots
        .into_iter()
        .zip(items)
        .map(|(slot, item)| slot.unwrap_or_else(|| f(item)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_computes_every_item() {
        let items: Vec<u64> = (0..1000).collect();
        let out = map_ordered(&items, 4, |x| x * x);
        assert_eq!(out, items.iter().map(|x| x * x).collect::<Vec<_>>());
        assert_eq!(map_ordered(&items[..1], 4, |x| x + 1), vec![1]);
        assert!(map_ordered(&items[..0], 4, |x| x + 1).is_empty());
    }

    #[test]
    fn a_panicking_worker_leaves_its_items_to_the_caller() {
        let main = std::thread::current().id();
        let items: Vec<u32> = (0..64).collect();
        // Every item panics off the calling thread; the caller computes them again.
        let out = map_ordered(&items, 4, |x| {
            if std::thread::current().id() != main {
                std::panic::panic_any("worker");
            }
            x + 1
        });
        assert_eq!(out, (1..65).collect::<Vec<_>>());
    }
}
