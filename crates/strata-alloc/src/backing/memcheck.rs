//! Valgrind client requests: telling memcheck which bytes of a caching allocator's segments are
//! live blocks.
//!
//! Memcheck sees `mmap`'d segments as one accessible range, so without help it cannot report
//! an overrun that stays inside a segment the allocator carved into blocks. Under memcheck,
//! strata therefore marks fresh segment memory `NOACCESS`, announces each block it hands out as
//! a heap block of the requested size (`MALLOCLIKE_BLOCK`, contents undefined) and each block
//! given back as freed (`FREELIKE_BLOCK`). Memcheck then reports a read or write past a block's
//! requested end, into a freed block or into cached space, as it would for `malloc`.
//!
//! A client request is a fixed sequence of instructions that does nothing on a real CPU and that
//! Valgrind recognises; whether the process runs under memcheck is asked once and remembered
//! (each caching allocator keeps the answer beside its backing), so outside memcheck each hook
//! costs a branch on a field. The sequence is defined for x86-64 here; on other architectures
//! the hooks do nothing.

use std::sync::OnceLock;

/// `VG_USERREQ__RUNNING_ON_VALGRIND`: how many Valgrinds the process runs under (0 natively).
const RUNNING_ON_VALGRIND: u64 = 0x1001;
/// `VG_USERREQ__MALLOCLIKE_BLOCK(addr, size, redzone, is_zeroed)`.
const MALLOCLIKE_BLOCK: u64 = 0x1301;
/// `VG_USERREQ__FREELIKE_BLOCK(addr, redzone)`.
const FREELIKE_BLOCK: u64 = 0x1302;
/// Memcheck's own requests start at `('M' << 24) | ('C' << 16)`; the first makes a range
/// inaccessible.
const MAKE_MEM_NOACCESS: u64 = ((b'M' as u64) << 24) | ((b'C' as u64) << 16);

/// Sends one client request and returns Valgrind's answer, or `default` on a real CPU.
#[cfg(target_arch = "x86_64")]
fn client_request(default: u64, request: u64, args: [u64; 5]) -> u64 {
    let block: [u64; 6] = [request, args[0], args[1], args[2], args[3], args[4]];
    let result: u64;
    // SAFETY: this is Valgrind's x86-64 client-request sequence (valgrind.h,
    // `VALGRIND_DO_CLIENT_REQUEST_EXPR`). On a real CPU the four rotations turn `rdi` by 128 bits
    // (back to its value) and `xchg rbx, rbx` changes nothing, so only the flags change; under
    // Valgrind the sequence makes Valgrind read the six words at `rax` (which live until the
    // end of this function) and put its answer in `rdx`. `rdi` is declared clobbered so the
    // compiler keeps nothing in it, and `rbx`, which cannot be an operand, ends as it began.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            inout("rdx") default => result,
            in("rax") block.as_ptr(),
            inout("rdi") 0u64 => _,
            options(nostack),
        );
    }
    result
}

/// Other architectures: no client requests, so never "under Valgrind".
#[cfg(not(target_arch = "x86_64"))]
fn client_request(default: u64, _request: u64, _args: [u64; 5]) -> u64 {
    default
}

/// Whether this process runs under Valgrind (asked once).
pub fn running_on_valgrind() -> bool {
    static UNDER: OnceLock<bool> = OnceLock::new();
    *UNDER.get_or_init(|| client_request(0, RUNNING_ON_VALGRIND, [0; 5]) > 0)
}

/// Whether memcheck is the Valgrind tool running this process (asked once): the tool these
/// hooks are for. Valgrind loads memcheck's preload library (its `malloc` replacement) into
/// the process only for memcheck, and names it in `LD_PRELOAD`. Under other tools (cachegrind
/// counting instructions, callgrind profiling) the hooks stay off, so what those tools measure
/// is what a real CPU runs.
pub fn running_under_memcheck() -> bool {
    static UNDER: OnceLock<bool> = OnceLock::new();
    *UNDER.get_or_init(|| {
        running_on_valgrind()
            && std::env::var_os("LD_PRELOAD")
                .is_some_and(|p| p.to_string_lossy().contains("vgpreload_memcheck"))
    })
}

/// Under memcheck, makes `[addr, addr + size)` inaccessible: fresh segment memory that no
/// block covers yet.
pub fn make_noaccess(addr: usize, size: usize) {
    if running_under_memcheck() {
        client_request(0, MAKE_MEM_NOACCESS, [addr as u64, size as u64, 0, 0, 0]);
    }
}

/// Announces a block of `size` requested bytes at `addr` handed to its owner: accessible,
/// contents undefined. The caller checked [`running_under_memcheck`] (a no-op on a real CPU
/// anyway).
pub fn block_handed_out(addr: usize, size: usize) {
    client_request(0, MALLOCLIKE_BLOCK, [addr as u64, size as u64, 0, 0, 0]);
}

/// Announces that the block at `addr` was given back: inaccessible until it is handed out
/// again. The caller checked [`running_under_memcheck`].
pub fn block_given_back(addr: usize) {
    client_request(0, FREELIKE_BLOCK, [addr as u64, 0, 0, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valgrind_is_detected_exactly_when_it_runs_the_process() {
        // `scripts/memcheck` sets the variable when it runs the tests under Valgrind.
        let under = std::env::var_os("STRATA_UNDER_VALGRIND").is_some();
        assert_eq!(running_on_valgrind(), under);
        // The script runs memcheck, the one tool the hooks speak to.
        assert_eq!(running_under_memcheck(), under);
        if !under {
            // On a real CPU the sequence answers the default whatever the request.
            assert_eq!(client_request(7, RUNNING_ON_VALGRIND, [0; 5]), 7);
            assert_eq!(client_request(9, MALLOCLIKE_BLOCK, [16, 32, 0, 0, 0]), 9);
        }
    }
}
