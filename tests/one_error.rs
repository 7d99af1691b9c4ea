//! Every library crate's error converts into `strata::Error`, so one `Result` serves a
//! whole program.

use std::path::Path;

use strata::data::DataError;
use strata::nn::state::StateError;
use strata::prelude::*;
use strata::profile::ProfileError;

fn converts<E: Into<strata::Error>>() {}

/// The public error types of the library crates, each checked to convert by `?`.
const CONVERTED: &[&str] = &[
    "Error",
    "AllocError",
    "BackingError",
    "CachingError",
    "ConfigError",
    "CudaError",
    "ReplayError",
    "SnapshotReadError",
    "UnpickleError",
    "WindowError",
    "ParseDeviceError",
    "DataError",
    "StateError",
    "ProfileError",
    "DistError",
];

#[test]
fn every_public_error_of_the_library_converts_into_one_error() {
    converts::<strata::Error>();
    converts::<strata::alloc::AllocError>();
    converts::<strata::alloc::BackingError>();
    converts::<strata::alloc::CachingError>();
    converts::<strata::alloc::ConfigError>();
    converts::<strata::alloc::backing::cuda::CudaError>();
    converts::<strata::alloc::offline::ReplayError>();
    converts::<strata::alloc::SnapshotReadError>();
    converts::<strata::alloc::offline::UnpickleError>();
    converts::<strata::alloc::offline::WindowError>();
    converts::<strata::core::ParseDeviceError>();
    converts::<DataError>();
    converts::<StateError>();
    converts::<ProfileError>();
    #[cfg(feature = "mpi")]
    converts::<strata::dist::DistError>();
    converts::<std::io::Error>();
    converts::<String>();
    converts::<&str>();

    // A crate that adds an error type adds its `From` and its name above.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut missing = Vec::new();
    for krate in std::fs::read_dir(&root).expect("crates/") {
        let krate = krate.expect("crates/ entry").path();
        if krate.ends_with("strata-cli") {
            continue; // the command's own errors end the program; nothing converts them
        }
        for file in rust_files(&krate.join("src")) {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for line in text.lines() {
                let line = line.trim_start();
                let Some(rest) = line
                    .strip_prefix("pub enum ")
                    .or_else(|| line.strip_prefix("pub struct "))
                else {
                    continue;
                };
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.ends_with("Error") && !CONVERTED.contains(&name.as_str()) {
                    missing.push(format!("{name} ({})", file.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "public errors with no conversion into strata::Error: {missing:?}"
    );
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

fn load(path: &Path) -> strata::Result<usize> {
    let dict = strata::nn::state::StateDict::load(path)?; // a StateError
    let x = Tensor::ones(&[2, 3], DType::F32)?;
    let _ = x.view(&[4, 2])?; // a tensor error
    Ok(dict.len())
}

#[test]
fn question_mark_keeps_each_error_recognisable() {
    // Another crate's error comes back by downcasting, with its own text.
    let err = load(Path::new("/nonexistent/model.safetensors")).unwrap_err();
    let state = err.downcast_ref::<StateError>().expect("a StateError");
    assert!(matches!(state, StateError::Io { .. }));
    assert_eq!(err.to_string(), state.to_string());

    // A tensor op's error wrapped by another crate comes out as the op's error itself.
    let shape = Tensor::ones(&[2], DType::F32)
        .and_then(|t| t.view(&[3]))
        .unwrap_err();
    let from_data: strata::Error = DataError::Tensor(shape.clone()).into();
    assert_eq!(from_data, shape);
    assert!(matches!(
        from_data,
        Error::View { .. } | Error::Shape { .. }
    ));

    // The program's own failures join the same type.
    let io: strata::Error = std::fs::read("/nonexistent").unwrap_err().into();
    assert!(io.downcast_ref::<std::io::Error>().is_some());
    let own: strata::Error = "no batches".into();
    assert_eq!(own.to_string(), "no batches");
}
