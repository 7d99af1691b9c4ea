//! Fuzzes the safetensors state-dict reader on bytes (a checkpoint's payload) and through
//! a file (the memory-mapped path `StateDict::load` takes).

use strata_nn::state::StateDict;

fn main() {
    let file = std::env::temp_dir().join(format!("strata-fuzz-{}.safetensors", std::process::id()));
    afl::fuzz!(|data: &[u8]| {
        let _ = StateDict::from_bytes(data, "input");
        if std::fs::write(&file, data).is_ok() {
            let _ = StateDict::load(&file);
        }
    });
}
