//! Fuzzes the IDX reader, raw and gzip-compressed (told apart by the first two bytes).

use std::path::Path;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let _ = strata_data::idx::parse(data, Path::new("input"));
    });
}
