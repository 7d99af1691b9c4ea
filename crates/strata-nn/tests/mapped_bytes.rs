//! Loading a state dict maps the file; the mapping is counted as `mapped_bytes` while any
//! tensor borrows it and released when the last one drops. One test in this binary, so
//! nothing else maps files meanwhile.

use strata_core::{memory, DType, Device, Tensor};
use strata_nn::state::{LoadOptions, StateDict, StateDictExt};
use strata_nn::{Linear, Module, Sequential};

fn mapped() -> (i64, i64) {
    let s = memory::memory_stats_map(Device::Cpu).unwrap();
    (s["mapped_bytes.current"], s["mapped_bytes.peak"])
}

#[test]
fn mapped_bytes_follow_the_borrowing_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let net = Sequential::new()
        .append(Linear::new(64, 64, true).unwrap())
        .unwrap()
        .append(Linear::new(64, 32, true).unwrap())
        .unwrap();
    net.save(&path).unwrap();
    let file_len = std::fs::metadata(&path).unwrap().len() as i64;
    assert_eq!(mapped().0, 0);
    memory::reset_peak_memory_stats(Device::Cpu).unwrap();

    // Copying loads map the file only while they read it.
    let copy = Sequential::new()
        .append(Linear::new(64, 64, true).unwrap())
        .unwrap()
        .append(Linear::new(64, 32, true).unwrap())
        .unwrap();
    copy.load(&path, LoadOptions::default()).unwrap();
    assert_eq!(mapped(), (0, file_len));

    // Assigned parameters keep the mapping, and it is counted until the last one drops.
    let borrowing = Sequential::new()
        .append(Linear::new(64, 64, true).unwrap())
        .unwrap()
        .append(Linear::new(64, 32, true).unwrap())
        .unwrap();
    let options = LoadOptions {
        assign: true,
        ..LoadOptions::default()
    };
    let dict = StateDict::load(&path).unwrap();
    borrowing.load_state_dict(&dict, options).unwrap();
    drop(dict);
    assert_eq!(mapped().0, file_len);
    let summary = memory::memory_summary(Device::Cpu, true).unwrap();
    assert!(summary.contains("Mapped file memory"), "{summary}");

    // The borrowed parameters train like any others.
    let x = Tensor::ones(&[3, 64], DType::F32).unwrap();
    borrowing
        .call(&x)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    assert!(borrowing.parameters().iter().all(|p| p.grad().is_some()));

    let params = borrowing.parameters();
    drop(borrowing);
    assert_eq!(mapped().0, file_len, "held parameters keep the mapping");
    drop(params);
    assert_eq!(mapped().0, 0);
}
