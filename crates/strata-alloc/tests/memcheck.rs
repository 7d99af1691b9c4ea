//! Valgrind's memcheck sees the caching allocator's blocks.
//!
//! A caching allocator carves blocks out of segments it mapped itself, so by default memcheck
//! sees one accessible range per segment and misses an overrun that stays inside it. strata
//! marks its blocks with Valgrind's client requests; these tests run this very test binary
//! under memcheck with a planted memory error and assert that memcheck reports it (and that a
//! correct program gets no report), so the marking is shown to work rather than assumed.
//!
//! Valgrind is needed: `scripts/test` installs it (Debian's `valgrind`).

use std::process::{Command, Output};

use strata_alloc::{CachingAllocator, DeviceAllocator, HostBacking, Site};

/// The child's environment variable: which memory error to plant.
const PLANT: &str = "STRATA_MEMCHECK_PLANT";
/// Memcheck's exit status when it found an error.
const ERROR_EXIT: i32 = 97;
/// The bytes requested: less than the block's rounded size (512), so the planted bytes lie
/// inside the block the allocator carved and inside its segment.
const REQUESTED: usize = 100;

/// In the child, commits the planted error through a block of the caching allocator.
fn plant(kind: &str) {
    let alloc = CachingAllocator::new(HostBacking::new());
    let site = Site::unknown("memcheck test");
    let block = alloc.allocate(REQUESTED, &site).expect("100 bytes");
    let p = block.ptr().as_ptr();
    // The pointers below lie inside the block's 512-byte rounded extent, which is mapped and
    // writable, so the process itself is never at risk; whether they lie inside the 100
    // requested bytes, and whether the block is still held, is what memcheck judges.
    match kind {
        // SAFETY: byte 99 of a live 100-byte block.
        "in-bounds" => unsafe {
            std::ptr::write_volatile(p.add(REQUESTED - 1), 1);
            assert_eq!(std::ptr::read_volatile(p.add(REQUESTED - 1)), 1);
            alloc.deallocate(block);
        },
        // SAFETY: byte 100 lies in the block's rounding (mapped, unused by anyone); the block
        // came from `alloc` and is given back once.
        "overrun" => unsafe {
            std::ptr::write_volatile(p.add(REQUESTED), 1);
            alloc.deallocate(block);
        },
        // SAFETY: the block came from `alloc` and is given back once; its segment stays
        // cached and mapped, and nothing else uses it, so the late write harms no one.
        "use-after-free" => unsafe {
            alloc.deallocate(block);
            std::ptr::write_volatile(p.add(8), 1);
        },
        other => panic!("no planted error called {other}"),
    }
}

/// Runs `test` of this binary under memcheck with `kind` planted.
fn under_memcheck(test: &str, kind: &str) -> Output {
    let exe = std::env::current_exe().expect("the test binary's path");
    Command::new("valgrind")
        .arg(format!("--error-exitcode={ERROR_EXIT}"))
        .args(["--leak-check=no", "--num-callers=30"])
        .arg(exe)
        .args(["--exact", test, "--test-threads=1", "--nocapture"])
        .env(PLANT, kind)
        .output()
        .expect("valgrind runs: install it with apt-get install valgrind (scripts/test does)")
}

/// The child runs the planted error and returns true; the parent returns false.
fn child() -> bool {
    match std::env::var(PLANT) {
        Ok(kind) => {
            plant(&kind);
            true
        }
        Err(_) => false,
    }
}

/// Runs `test` under memcheck with `kind` planted and asserts memcheck reported one invalid
/// write whose address it describes as `address`; returns the report.
fn assert_reported(test: &str, kind: &str, address: &str) -> String {
    let out = under_memcheck(test, kind);
    let report = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(ERROR_EXIT), "{report}");
    assert!(report.contains("Invalid write of size 1"), "{report}");
    assert!(report.contains(address), "{report}");
    report
}

#[test]
fn a_write_one_byte_past_a_cached_blocks_end_is_reported() {
    if child() {
        return;
    }
    let report = assert_reported(
        "a_write_one_byte_past_a_cached_blocks_end_is_reported",
        "overrun",
        &format!("is 0 bytes after a block of size {REQUESTED} alloc'd"),
    );
    // The report points at the function that wrote (inlined or not).
    assert!(
        report.contains("plant (memcheck.rs:") || report.contains("memcheck::plant"),
        "{report}"
    );
}

#[test]
fn a_write_into_a_block_after_it_was_given_back_is_reported() {
    if child() {
        return;
    }
    assert_reported(
        "a_write_into_a_block_after_it_was_given_back_is_reported",
        "use-after-free",
        &format!("is 8 bytes inside a block of size {REQUESTED} free'd"),
    );
}

#[test]
fn writes_within_the_requested_bytes_are_clean() {
    if child() {
        return;
    }
    let out = under_memcheck("writes_within_the_requested_bytes_are_clean", "in-bounds");
    let report = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(report.contains("ERROR SUMMARY: 0 errors"), "{report}");
}
