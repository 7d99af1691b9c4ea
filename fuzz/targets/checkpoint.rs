//! Fuzzes the training-checkpoint reader (framing, checksum, payload, manifest). The
//! checksum rejects almost every mutation, so AFL mostly explores the framing; the payload
//! behind a valid checksum is the safetensors target's.

fn main() {
    let file = std::env::temp_dir().join(format!("strata-fuzz-{}.ckpt", std::process::id()));
    afl::fuzz!(|data: &[u8]| {
        if std::fs::write(&file, data).is_ok() {
            let _ = strata_cli::train::checkpoint_summary(&file);
        }
    });
}
