//! Fuzzes the conformance runner's program documents (JSON: programs of steps naming ops
//! and their arguments), which `strata conform` reads from files.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = strata_cli::conform::run_document(text);
        }
    });
}
