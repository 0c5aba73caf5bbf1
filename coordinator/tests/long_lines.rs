//! Planning a job whose input holds one very long line: the planner counts
//! lines and the dedup pass reads them without ever holding the line, so
//! memory stays that of a normal input. Measured by what the planning
//! thread allocates (the allocator below counts per thread, so tests on
//! other threads do not disturb it).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;
use std::path::Path;

use paraforge_job::config::JobConfig;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // try_with: nothing to count while a thread's locals are torn down.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// What `f` returns and the most bytes this thread held at once while it
/// ran, beyond what it held before.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let out = f();
    (out, (PEAK.with(Cell::get) - start).max(0) as usize)
}

#[test]
fn a_gzip_input_with_a_huge_line_plans_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let huge = vec![b'x'; 32 << 20];
    let gz = dir.path().join("in.tsv.gz");
    let mut e = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    e.write_all(b"a-1\t1.0\tJedna.\tOne.\na-2\t1.0\t").unwrap();
    e.write_all(&huge).unwrap();
    e.write_all(b"\tTwo.\na-3\t1.0\tJedna.\tOne again.\n")
        .unwrap();
    e.finish().unwrap();
    drop(huge);
    let text = format!(
        "[job]\nname = \"t\"\noutput = \"out\"\nshard_pairs = 2\n[input]\npaths = [{:?}]\nformat = \"czeng16\"\nmax_chars = 100\n[model]\ndir = \"m\"\n[filters]\ndedup_sources = true\n",
        gz.display().to_string()
    );
    let cfg = JobConfig::parse(&text, Path::new("t.toml")).unwrap();
    let (plan, peak) = peak_during(|| paraforge_coordinator::plan::plan_job(&cfg).unwrap());
    let lines: Vec<u64> = plan.shards.iter().map(|s| s.range.lines).collect();
    assert_eq!(lines, [2, 1]);
    // Line 3 repeats line 1's source; the long line is no pair at all.
    let drops: Vec<&[u64]> = plan
        .shards
        .iter()
        .map(|s| s.drop_lines.as_slice())
        .collect();
    assert_eq!(drops, [&[][..], &[3][..]]);
    // Buffers of a normal input (1 MiB blocks, the decompressor's window,
    // the spill writers), not the 32 MB line.
    assert!(peak < 8 << 20, "planning held {peak} bytes at once");
}
