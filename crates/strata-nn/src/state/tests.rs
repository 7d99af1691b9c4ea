use std::path::{Path, PathBuf};

use strata_core::{DType, Tensor};

use super::*;
use crate::{LayerNorm, Linear, Module, Sequential};

fn net() -> Sequential {
    Sequential::new()
        .append(Linear::new(4, 6, true).unwrap())
        .unwrap()
        .append(LayerNorm::new(&[6]).unwrap())
        .unwrap()
}

fn file(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// A safetensors file with `header` (padded to 8 bytes) and `data`.
fn raw(path: &Path, header: &str, data: &[u8]) {
    let mut h = header.as_bytes().to_vec();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend(h);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

fn load_err(path: &Path) -> String {
    StateDict::load(path).unwrap_err().to_string()
}

#[test]
fn round_trip_keeps_keys_values_and_dtypes() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, "m.safetensors");
    let a = net();
    let mut dict = a.state_dict();
    dict.insert("extra.count", Tensor::from_vec(vec![7i64], &[1]).unwrap());
    dict.insert(
        "extra.mask",
        Tensor::from_vec(vec![true, false, true], &[3]).unwrap(),
    );
    dict.insert("extra.half", Tensor::ones(&[3], DType::BF16).unwrap());
    dict.save(&path).unwrap();
    let back = StateDict::load(&path).unwrap();
    let mut keys = back.keys();
    keys.sort();
    let mut want = dict.keys();
    want.sort();
    assert_eq!(keys, want);
    for (k, t) in dict.iter() {
        let b = back.get(k).unwrap();
        assert_eq!(b.dtype(), t.dtype(), "{k}");
        assert_eq!(b.shape(), t.shape(), "{k}");
        assert_eq!(
            b.to(DType::F64).unwrap().to_vec::<f64>().unwrap(),
            t.to(DType::F64).unwrap().to_vec::<f64>().unwrap(),
            "{k}"
        );
    }
    // No temporary file is left beside it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn bytes_in_memory_are_the_files_bytes_and_read_back_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, "m.safetensors");
    let mut dict = net().state_dict();
    dict.set_metadata("note", "kept");
    dict.save(&path).unwrap();
    let bytes = dict.to_bytes().unwrap();
    assert_eq!(bytes, std::fs::read(&path).unwrap());
    let back = StateDict::from_bytes(&bytes, "inside").unwrap();
    assert_eq!(back.metadata("note"), Some("kept"));
    for (k, t) in dict.iter() {
        let b = back.get(k).unwrap();
        assert_eq!(
            b.to_vec::<f32>().unwrap(),
            t.to_vec::<f32>().unwrap(),
            "{k}"
        );
    }
    let cut = StateDict::from_bytes(&bytes[..bytes.len() - 3], "inside").err();
    let message = cut.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("inside") && message.contains("truncated"),
        "{message}"
    );
}

#[test]
fn loading_copies_into_the_same_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, "m.safetensors");
    let a = net();
    a.save(&path).unwrap();
    let b = net();
    let held = b.parameters();
    b.load(&path, LoadOptions::default()).unwrap();
    for ((pa, pb), h) in a.parameters().iter().zip(b.parameters()).zip(&held) {
        assert!(pb.is_same(h));
        assert_eq!(pa.to_vec::<f32>().unwrap(), pb.to_vec::<f32>().unwrap());
    }
}

#[test]
fn assign_takes_the_mapped_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, "m.safetensors");
    // Even element counts keep every tensor 8-byte aligned in the file.
    let a = Sequential::new()
        .append(Linear::new(4, 4, true).unwrap())
        .unwrap();
    a.save(&path).unwrap();
    let b = Sequential::new()
        .append(Linear::new(4, 4, true).unwrap())
        .unwrap();
    let dict = StateDict::load(&path).unwrap();
    let w = dict.get("0.weight").unwrap().clone();
    let options = LoadOptions {
        assign: true,
        ..LoadOptions::default()
    };
    b.load_state_dict(&dict, options).unwrap();
    let p = &b.parameters()[0];
    assert!(p.shares_storage(&w), "the parameter views the mapping");
    assert!(p.requires_grad() && p.is_leaf());
    assert_eq!(
        p.to_vec::<f32>().unwrap(),
        a.parameters()[0].to_vec::<f32>().unwrap()
    );
    // Writes go to private pages, not to the file.
    p.detach().unwrap().fill_(3.0).unwrap();
    let again = StateDict::load(&path).unwrap();
    assert_ne!(
        again.get("0.weight").unwrap().to_vec::<f32>().unwrap(),
        vec![3.0f32; 16]
    );
}

#[test]
fn a_mismatch_lists_every_problem_and_changes_nothing() {
    let a = net();
    let before: Vec<Vec<f32>> = a.parameters().iter().map(|p| p.to_vec().unwrap()).collect();
    let mut dict = a.state_dict();
    dict.remove("1.bias");
    dict.insert("0.weight", Tensor::zeros(&[6, 5], DType::F32).unwrap());
    dict.insert("0.bias", Tensor::zeros(&[6], DType::I64).unwrap());
    dict.insert("1.weight", Tensor::zeros(&[6], DType::F32).unwrap());
    dict.insert("stray", Tensor::zeros(&[1], DType::F32).unwrap());
    let err = a
        .load_state_dict(&dict, LoadOptions::default())
        .unwrap_err();
    let StateError::Mismatch(p) = &err else {
        panic!("{err}")
    };
    assert_eq!(p.missing, ["1.bias"]);
    assert_eq!(p.unexpected, ["stray"]);
    let keys: Vec<&str> = p.mismatched.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(keys, ["0.weight", "0.bias"]);
    let text = err.to_string();
    assert!(
        text.contains("missing keys: 1.bias") && text.contains("unexpected keys: stray"),
        "{text}"
    );
    let after: Vec<Vec<f32>> = a.parameters().iter().map(|p| p.to_vec().unwrap()).collect();
    assert_eq!(before, after);

    // Not strict: missing and unexpected keys are reported, the rest loads.
    let mut dict = a.state_dict();
    dict.remove("1.bias");
    dict.insert("stray", Tensor::zeros(&[1], DType::F32).unwrap());
    dict.insert("1.weight", Tensor::full(&[6], 2.0, DType::F64).unwrap());
    let options = LoadOptions {
        strict: false,
        ..LoadOptions::default()
    };
    let report = a.load_state_dict(&dict, options).unwrap();
    assert_eq!(report.missing, ["1.bias"]);
    assert_eq!(report.unexpected, ["stray"]);
    assert_eq!(a.parameters()[2].to_vec::<f32>().unwrap(), [2.0; 6]);
}

#[test]
fn corrupt_files_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let p = file(&dir, "bad.safetensors");

    std::fs::write(&p, b"").unwrap();
    assert!(load_err(&p).contains("empty"));
    std::fs::write(&p, [1u8, 2, 3]).unwrap();
    assert!(load_err(&p).contains("too short"));
    std::fs::write(&p, 1000u64.to_le_bytes()).unwrap();
    assert!(load_err(&p).contains("truncated"));
    raw(&p, "{not json", &[]);
    assert!(load_err(&p).contains("not valid JSON"));

    let w = r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#;
    raw(&p, w, &[0u8; 12]);
    let e = load_err(&p);
    assert!(e.contains("key `w`") && e.contains("truncated"), "{e}");
    raw(&p, w, &[0u8; 20]);
    assert!(load_err(&p).contains("belong to no tensor"));
    raw(
        &p,
        r#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}"#,
        &[0u8; 16],
    );
    let e = load_err(&p);
    assert!(e.contains("key `w`") && e.contains("needs 12 bytes"), "{e}");
    raw(
        &p,
        r#"{"w":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}}"#,
        &[0u8; 4],
    );
    assert!(load_err(&p).contains("U16 has no strata counterpart"));
    raw(
        &p,
        r#"{"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,4]}}"#,
        &[0u8; 4],
    );
    assert!(load_err(&p).contains("not a safetensors dtype"));
    raw(&p, r#"{"w":{"shape":[2],"data_offsets":[0,4]}}"#, &[0u8; 4]);
    assert!(load_err(&p).contains("no \"dtype\""));
    let overlap = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#;
    raw(&p, overlap, &[0u8; 6]);
    let e = load_err(&p);
    assert!(e.contains("key `b`") && e.contains("overlap"), "{e}");
    raw(
        &p,
        r#"{"m":{"dtype":"BOOL","shape":[8],"data_offsets":[0,8]}}"#,
        &[0, 1, 2, 0, 0, 0, 0, 0],
    );
    let e = load_err(&p);
    assert!(e.contains("key `m`") && e.contains("not 0 or 1"), "{e}");
    assert!(matches!(
        StateDict::load(dir.path().join("absent")).unwrap_err(),
        StateError::Io { .. }
    ));
}

#[test]
fn the_reference_implementation_reads_and_writes_the_same_files() {
    use safetensors::tensor::{Dtype, TensorView};
    let dir = tempfile::tempdir().unwrap();
    let p = file(&dir, "m.safetensors");
    let a = net();
    a.save(&p).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let w = st.tensor("0.weight").unwrap();
    assert_eq!(w.dtype(), Dtype::F32);
    assert_eq!(w.shape(), [6, 4]);
    let want: Vec<u8> = a.parameters()[0]
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(w.data(), want.as_slice());

    let values: Vec<u8> = [1.5f64, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let view = TensorView::new(Dtype::F64, vec![2], &values).unwrap();
    let counts: Vec<u8> = 9i64.to_le_bytes().to_vec();
    let count = TensorView::new(Dtype::I64, vec![], &counts).unwrap();
    safetensors::serialize_to_file([("x", view), ("n", count)], None, &p).unwrap();
    let d = StateDict::load(&p).unwrap();
    assert_eq!(d.get("x").unwrap().to_vec::<f64>().unwrap(), [1.5, -2.0]);
    assert_eq!(d.get("n").unwrap().item::<i64>().unwrap(), 9);
}
