//! Runs one reader of outside bytes over every file of its corpus folder
//! (`tests/corpus/<reader>/`, made by `scripts/make-reader-corpus.py`): each `valid-*` file
//! must give a value, each `bad-*` file a clear error, each `any-*` file (random damage that
//! may or may not matter) one or the other; none may panic, and none may make the
//! reader ask for a large allocation (the largest single request is measured by the test
//! binary's allocator, per thread). Each crate's `reader_corpus` test calls [`check`] and
//! installs [`Counting`] with `#[global_allocator] static A: Counting = Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// The largest single allocation a reader may ask for on any corpus file. Every file is
/// small: a length field believed would ask for far more.
pub const LARGEST_ALLOCATION: usize = 64 << 20;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, noting the largest request this thread has made.
pub struct Counting;

fn note(size: usize) {
    // `try_with`: the thread's slot may already be gone while it exits.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call is forwarded to `System` unchanged; noting a size allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout`, as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `dealloc`, with the caller's `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The corpus folder of `reader`.
pub fn folder(reader: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("tests/corpus").is_dir())
        .expect("the workspace root holds tests/corpus")
        .join("tests/corpus")
        .join(reader)
}

/// Reads every file of `reader`'s corpus with `read` and panics with every file that
/// broke a rule; at least `min_files` must be there, with valid and bad ones.
pub fn check<T, E: Display>(reader: &str, min_files: usize, read: impl Fn(&Path) -> Result<T, E>) {
    let dir = folder(reader);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/make-reader-corpus.py)", dir.display()))
        .map(|e| e.expect("a folder entry").path())
        .collect();
    files.sort();
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let count = |prefix: &str| files.iter().filter(|p| name(p).starts_with(prefix)).count();
    let (valid, bad, any) = (count("valid-"), count("bad-"), count("any-"));
    assert!(
        files.len() >= min_files && valid > 0 && bad > 0 && valid + bad + any == files.len(),
        "{}: {} files ({valid} valid-*, {bad} bad-*, {any} any-*), at least {min_files} \
         expected, each named valid-*, bad-* or any-*",
        dir.display(),
        files.len()
    );
    let mut broken = Vec::new();
    for path in &files {
        let file = name(path);
        LARGEST.with(|l| l.set(0));
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            read(path).map(|_| ()).map_err(|e| e.to_string())
        }));
        let largest = LARGEST.with(Cell::get);
        match outcome {
            Err(_) => broken.push(format!("{file}: panicked")),
            Ok(Ok(())) if file.starts_with("bad-") => {
                broken.push(format!("{file}: read without an error"))
            }
            Ok(Err(e)) if file.starts_with("valid-") => broken.push(format!("{file}: {e}")),
            Ok(Err(e)) if e.trim().is_empty() => broken.push(format!("{file}: an empty error")),
            Ok(_) => {}
        }
        if largest > LARGEST_ALLOCATION {
            broken.push(format!("{file}: asked for {largest} bytes at once"));
        }
    }
    assert!(
        broken.is_empty(),
        "{}:\n{}",
        dir.display(),
        broken.join("\n")
    );
}
