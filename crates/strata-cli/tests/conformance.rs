//! The public conformance suites, run in-process against PyTorch's recorded answers.
//!
//! The comparison follows the protocol: errors at the same step, layouts and versions exact,
//! values within each dtype's tolerance.

use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/conformance");

fn load(suite: &str, kind: &str) -> Value {
    let path = format!("{FIXTURES}/{suite}.{kind}.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn num(v: &Value) -> f64 {
    match v {
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("unexpected value string {other}"),
        },
        v => v.as_f64().unwrap_or(f64::NAN),
    }
}

fn close(expected: &Value, got: &Value, dtype: &str) -> bool {
    match (expected, got) {
        (Value::Null, Value::Null) => true,
        (Value::Array(e), Value::Array(g)) if e.len() == g.len() => {
            let tol = match dtype {
                "f32" => Some((1e-4, 1e-5)),
                "f64" => Some((1e-10, 1e-10)),
                "f16" => Some((1e-2, 1e-2)),
                "bf16" => Some((2e-2, 2e-2)),
                _ => None,
            };
            e.iter().zip(g).all(|(e, g)| {
                let (x, y) = (num(g), num(e));
                match tol {
                    None => x == y,
                    Some(_) if x.is_nan() || y.is_nan() => x.is_nan() && y.is_nan(),
                    Some(_) if x.is_infinite() || y.is_infinite() => x == y,
                    Some((rtol, atol)) => (x - y).abs() <= atol + rtol * y.abs(),
                }
            })
        }
        _ => false,
    }
}

/// Why a program's result differs from the expected one (empty when it passes).
fn differences(expected: &Value, got: &Value) -> Vec<String> {
    let mut why = Vec::new();
    let (ee, ge) = (&expected["error"], &got["error"]);
    if ee.is_null() != ge.is_null() {
        why.push(format!("error expected {ee}, got {ge}"));
    } else if !ee.is_null() && ee["step"] != ge["step"] {
        why.push(format!("error expected at step {}, got {ge}", ee["step"]));
    }
    let (eo, go) = (
        expected["observations"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        got["observations"].as_array().cloned().unwrap_or_default(),
    );
    if eo.len() != go.len() {
        why.push(format!(
            "{} observations expected, got {}",
            eo.len(),
            go.len()
        ));
    }
    for (e, g) in eo.iter().zip(&go) {
        for k in [
            "var",
            "dtype",
            "shape",
            "strides",
            "offset",
            "contiguous",
            "storage",
            "version",
            "requires_grad",
            "is_leaf",
        ] {
            if e[k] != g[k] {
                why.push(format!("{}.{k}: expected {}, got {}", e["var"], e[k], g[k]));
            }
        }
        let dtype = e["dtype"].as_str().unwrap_or("");
        if !close(&e["values"], &g["values"], dtype) {
            why.push(format!("{}.values differ", e["var"]));
        }
        if !close(&e["grad"], &g["grad"], dtype) {
            why.push(format!("{}.grad differs", e["var"]));
        }
    }
    why
}

/// Runs a suite and returns (passed, failures with reasons).
fn run_suite(suite: &str) -> (usize, Vec<String>) {
    let programs = load(suite, "programs");
    let expected = load(suite, "expected");
    let text = serde_json::to_string(&programs).unwrap();
    let results =
        strata_cli::conform::run_document(&text).expect("the fixture is a valid document");
    let got = results["results"].as_array().expect("a results list");
    let exp = expected["results"].as_array().expect("an expected list");
    assert_eq!(got.len(), exp.len(), "one result per program");
    let mut passed = 0;
    let mut failures = Vec::new();
    for (e, g) in exp.iter().zip(got) {
        assert_eq!(e["id"], g["id"], "results keep the programs' order and ids");
        let why = differences(e, g);
        if why.is_empty() {
            passed += 1;
        } else {
            failures.push(format!("{}: {}", e["id"], why.join("; ")));
        }
    }
    (passed, failures)
}

fn assert_all_pass(suite: &str) {
    let (passed, failures) = run_suite(suite);
    assert!(
        failures.is_empty(),
        "{suite}: {passed} passed, {} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn views_suite_matches_pytorch() {
    assert_all_pass("views");
}

#[test]
fn inplace_suite_matches_pytorch() {
    assert_all_pass("inplace");
}

/// Small models in training and eval mode: conv (dilation, groups), pools (padding,
/// ceil_mode), batch norm, the RNN cells, the losses, embedding with padding_idx.
#[test]
fn layers_suite_matches_pytorch() {
    assert_all_pass("layers");
}

/// Small training loops: SGD, Adam and AdamW with their options and param groups, the
/// learning-rate schedules, autocast regions and the grad scaler.
#[test]
fn train_suite_matches_pytorch() {
    assert_all_pass("train");
}

/// Output layouts of element-wise ops when size-1 dimensions carry unusual strides (made by
/// `as_strided`, unsqueeze of a transpose, narrow, select, expand, permutes), with inputs of
/// other dtypes, numbers, 0-d and broadcast partners, in place and into `out=`.
#[test]
fn layout_fixture_matches_pytorch() {
    assert_all_pass("layout");
}

/// Inference mode: inference tensors (no version counter), normal tensors and their views
/// modified or viewed inside it, copies, `detach_`, `copy_` onto itself and `out=` around it.
#[test]
fn inference_fixture_matches_pytorch() {
    assert_all_pass("inference");
}

/// The ops a transformer reaches for: `triu` and `tril` (diagonals, batches, strided inputs,
/// dtypes, gradients, errors), `roll` (one and several dims, flattened, large and negative
/// shifts, gradients, errors) and gelu's tanh form (values, dtypes, gradients). Made by
/// `scripts/make-transformer-op-programs.py`; the answers are PyTorch's.
#[test]
fn transformer_ops_fixture_matches_pytorch() {
    assert_all_pass("transformer_ops");
}

/// `scaled_dot_product_attention` on the path each side chooses by PyTorch's CPU rule, and
/// on each path by name (`backend`: math or flash): 2-, 3- and 4-d shapes, broadcast
/// batches, bool and float masks (a fully masked row included), `is_causal` with L < S and
/// L > S, `scale` (negative too), grouped and shared key/value heads, several blocks of the
/// fused kernel, gradients of q, k and v, f64, f16, bf16 and autocast, and the errors
/// PyTorch raises (flash alone where it cannot run among them). Made by
/// `scripts/make-attention-programs.py`; the answers are PyTorch's.
#[test]
fn attention_fixture_matches_pytorch() {
    assert_all_pass("attention");
}

/// The op, autograd and functional-nn suites.
#[test]
fn ops_autograd_and_nn_suites_match_pytorch() {
    for suite in ["ops", "autograd", "nn"] {
        assert_all_pass(suite);
    }
}

#[test]
fn junk_programs_are_program_errors_not_crashes() {
    let doc = r#"{"programs": [
        {"id": "a", "steps": [{"op": "no_such_op"}]},
        {"id": "b", "steps": [{"op": "observe", "in": ["ghost"]}]},
        {"id": "c", "steps": [{"op": "zeros", "args": {"shape": [1000000000, 1000000000]}, "let": "x"}]},
        {"id": "d", "steps": [{"op": "arange", "args": {"n": "ten"}, "let": "x"}]},
        {"id": "e", "steps": [{"op": "arange", "args": {"n": 4}, "let": ["x", "y"]}]},
        {"id": "f", "steps": [{"op": "arange", "args": {"n": 1}, "let": "x"},
                               {"op": "expand", "in": ["x"], "args": {"shape": [100000000, 100000000]}, "let": "y"},
                               {"op": "exp", "in": ["y"], "let": "z"}]},
        {"id": "g", "steps": [{"op": "zeros", "args": {"shape": [100000, 100000]}, "let": "x"}]},
        {"id": "h", "steps": [{"op": "strided", "args": {"shape": [3], "strides": [-1]}, "let": "x"}]},
        {"id": "i", "steps": [{"op": "add_", "in": [], "args": {}}]},
        {"id": "j", "steps": "nonsense"}
    ]}"#;
    // A program without a steps list is a malformed document.
    assert!(strata_cli::conform::run_document(doc).is_err());
    let doc = doc.replace(
        r#"{"id": "j", "steps": "nonsense"}"#,
        r#"{"id": "j", "steps": []}"#,
    );
    let out = strata_cli::conform::run_document(&doc).expect("valid document");
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 10);
    let steps: Vec<Value> = results.iter().map(|r| r["error"]["step"].clone()).collect();
    assert_eq!(steps[0], 0);
    assert!(results[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unsupported op: no_such_op"));
    assert_eq!(steps[1], 0);
    assert_eq!(steps[2], 0);
    assert_eq!(steps[3], 0);
    assert_eq!(steps[4], 0);
    assert_eq!(steps[5], 2);
    assert_eq!(steps[6], 0, "40 GB is over the runner's memory limit");
    assert_eq!(steps[7], 0);
    assert_eq!(steps[8], 0);
    assert!(results[9]["error"].is_null());
}

#[test]
fn invalid_json_is_a_load_error() {
    assert!(strata_cli::conform::run_document("{").is_err());
    assert!(strata_cli::conform::run_document("[]").is_err());
}
