//! Batches spread over several decoders at once (`LoadOptions::streams`,
//! CTranslate2's `inter_threads`): each decoder takes the next batch no
//! one has taken, and results are put back by batch, so the output is the
//! same as with one decoder.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

/// Runs `run(worker, batch)` for every batch, one thread per worker (a
/// single worker runs on the calling thread), and hands each result to
/// `emit` on the calling thread as it arrives (in any order). Batches are taken last first: they come cut from length-sorted
/// sentences, so the longest go first and the short ones fill in at the
/// end, instead of one stream finishing the longest batch alone. The first
/// failure stops further batches from starting. Every batch taken before a
/// failed one runs to the end, so the error returned, that of the first
/// failed batch in taking order, does not depend on timing.
pub(crate) fn run<W: Send, T: Send, E: Send>(
    workers: &mut [W],
    batches: &[Range<usize>],
    run: impl Fn(&mut W, &Range<usize>) -> Result<T, E> + Sync,
    mut emit: impl FnMut(&Range<usize>, T),
) -> Result<(), E> {
    if let [w] = workers {
        for batch in batches.iter().rev() {
            emit(batch, run(w, batch)?);
        }
        return Ok(());
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for w in workers.iter_mut() {
            let tx = tx.clone();
            let (next, stop, run) = (&next, &stop, &run);
            scope.spawn(move || {
                // A panicking stream stops the others too (the scope then
                // passes the panic on), instead of their decoding every
                // remaining batch first.
                let _stop_on_panic = StopOnPanic(stop);
                while !stop.load(Ordering::Relaxed) {
                    let taken = next.fetch_add(1, Ordering::Relaxed);
                    let Some(k) = batches.len().checked_sub(taken + 1) else {
                        break;
                    };
                    let batch = &batches[k];
                    let r = run(w, batch);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if tx.send((k, r)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut failed: Option<(usize, E)> = None;
        for (k, r) in rx {
            match r {
                Ok(t) if failed.is_none() => emit(&batches[k], t),
                Ok(_) => {}
                Err(e) => {
                    // Taken last first: the higher index was taken first.
                    if failed.as_ref().is_none_or(|(j, _)| k > *j) {
                        failed = Some((k, e));
                    }
                }
            }
        }
        failed.map_or(Ok(()), |(_, e)| Err(e))
    })
}

struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::run;
    use std::ops::Range;

    fn ranges(n: usize) -> Vec<Range<usize>> {
        (0..n).map(|i| i * 3..i * 3 + 3).collect()
    }

    #[test]
    fn the_last_batch_is_taken_first() {
        let batches = ranges(10);
        let mut workers = vec![Vec::new()];
        run(
            &mut workers,
            &batches,
            |w, b| {
                w.push(b.start / 3);
                Ok::<_, ()>(())
            },
            |_, _| {},
        )
        .unwrap();
        assert_eq!(workers[0], (0..10).rev().collect::<Vec<_>>());
    }

    #[test]
    fn every_batch_runs_once_and_each_worker_takes_some() {
        let batches = ranges(40);
        let mut workers = vec![0usize; 3];
        let mut seen = vec![0usize; 40];
        // Each worker's first batch waits for the other two to have taken
        // theirs, so that a thread starting late still gets one.
        let start = std::sync::Barrier::new(3);
        run(
            &mut workers,
            &batches,
            |w, b| {
                if *w == 0 {
                    start.wait();
                }
                *w += 1;
                // Uneven work, so that the workers interleave.
                std::thread::sleep(std::time::Duration::from_micros((b.start % 7) as u64 * 200));
                Ok::<_, ()>(b.start / 3)
            },
            |b, k| {
                assert_eq!(b.start / 3, k);
                seen[k] += 1;
            },
        )
        .unwrap();
        assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        assert_eq!(workers.iter().sum::<usize>(), 40);
        assert!(workers.iter().all(|&n| n > 0), "{workers:?}");
    }

    #[test]
    fn a_panicking_stream_stops_the_others() {
        let batches = ranges(200);
        let done = std::sync::atomic::AtomicUsize::new(0);
        let mut workers = vec![(); 2];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(
                &mut workers,
                &batches,
                |_, b| {
                    if b.start / 3 == 199 {
                        panic!("stream failure");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok::<_, ()>(())
                },
                |_, _| {},
            )
        }));
        assert!(r.is_err(), "the panic is passed on");
        // The others stop once the panic unwinds; the panic hook (a
        // backtrace with RUST_BACKTRACE set) runs before that, so allow
        // for some batches meanwhile, far fewer than the 199 left.
        assert!(
            done.load(std::sync::atomic::Ordering::Relaxed) < 150,
            "{} batches ran after the panic",
            done.load(std::sync::atomic::Ordering::Relaxed)
        );
    }

    #[test]
    fn the_earliest_failed_batch_is_reported_and_later_ones_do_not_start() {
        let batches = ranges(200);
        let started = std::sync::atomic::AtomicUsize::new(0);
        for _ in 0..20 {
            started.store(0, std::sync::atomic::Ordering::Relaxed);
            let mut workers = vec![(); 4];
            let err = run(
                &mut workers,
                &batches,
                |_, b| {
                    started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let k = b.start / 3;
                    // Batch 190 (taken before 189) fails late, 189 at
                    // once: 190 must win.
                    if k == 190 {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    if k == 190 || k == 189 {
                        Err(k)
                    } else {
                        Ok(())
                    }
                },
                |_, _| {},
            )
            .unwrap_err();
            assert_eq!(err, 190);
            assert!(started.load(std::sync::atomic::Ordering::Relaxed) < 200);
        }
    }
}
