//! Watches that do not flood: over 50 steps of a pitfall, a finding is given in full once,
//! then as a few one-line reminders, and it names the lines of this file (the program's),
//! never strata's own sources or `<unknown>`.

mod common;

/// This file, to find the lines findings must name.
const SOURCE: &str = include_str!("quiet_watches.rs");

use strata_core::nn::functional::{cross_entropy, Reduction};
use strata_core::{DType, Device, Tensor};
use strata_nn::Module;
use strata_profile::{Finding, FindingKind, GraphWatch, LeakWatch};

type Res = Result<(), Box<dyn std::error::Error>>;

const STEPS: usize = 50;

fn lines(found: &[Finding]) -> usize {
    found.iter().map(|f| f.message.lines().count()).sum()
}

#[test]
fn a_kept_graph_is_reported_once_then_reminded_in_single_lines() -> Res {
    let _serial = common::serial();
    let m = common::mlp(16, 32, 4)?;
    let x = Tensor::randn(&[8, 16], DType::F32)?;
    let y = Tensor::zeros(&[8], DType::I64)?;
    let mut watch = GraphWatch::new();
    let mut losses = Vec::new();
    let mut found = Vec::new();
    for _ in 0..STEPS {
        let logits = m.call(&x)?; // the model runs here
        let loss = cross_entropy(&logits, &y, Reduction::Mean)?; // the loss is made here
        loss.backward()?;
        m.zero_grad()?;
        losses.push(loss); // the pitfall: each loss keeps its step's graph
        found.extend(watch.step());
    }
    for f in &found {
        println!("{f}");
    }
    let full: Vec<&Finding> = found.iter().filter(|f| !f.reminder).collect();
    assert_eq!(full.len(), 1, "{found:#?}");
    assert_eq!(full[0].kind, FindingKind::GraphKept);
    let reminders = found.len() - 1;
    assert!((1..=3).contains(&reminders), "{found:#?}");
    assert!(found
        .iter()
        .filter(|f| f.reminder)
        .all(|f| f.message.lines().count() == 1));
    // A block each step was ~47 blocks; now: one block and a few lines.
    assert!(lines(&found) <= full[0].message.lines().count() + 3);

    // Every site is a line of this file: the model's call (with the layer's scope) and the
    // loss, even for the views `linear` and `cross_entropy` make inside themselves.
    let model_line = format!(
        "quiet_watches.rs:{}",
        common::line_of(SOURCE, "the model runs here")
    );
    let loss_line = format!(
        "quiet_watches.rs:{}",
        common::line_of(SOURCE, "the loss is made here")
    );
    let sites: Vec<&str> = full[0].message.lines().skip(1).collect();
    assert!(!sites.is_empty());
    for site in &sites {
        assert!(
            site.contains(&model_line) || site.contains(&loss_line),
            "{site}"
        );
        assert!(
            !site.contains("<unknown>") && !site.contains("src/"),
            "{site}"
        );
    }
    assert!(
        sites.iter().any(|s| s.contains("(2, TBackward0)")),
        "{sites:?}"
    );
    // The full finding again, on demand, with today's counts (50 graphs alive).
    let report = watch.report();
    assert_eq!(report[0].kind, FindingKind::GraphKept);
    assert_eq!(
        report[0].message.lines().count(),
        full[0].message.lines().count()
    );
    assert!(
        report[0].message.contains(&format!("({STEPS} alive)")),
        "{}",
        report[0]
    );
    Ok(())
}

#[test]
fn a_kept_loss_is_named_at_the_program_line_that_made_it() -> Res {
    let _serial = common::serial();
    let logits = Tensor::randn(&[64, 10], DType::F32)?;
    let y = Tensor::zeros(&[64], DType::I64)?;
    let mut watch = LeakWatch::new(Device::Cpu);
    let mut kept = Vec::new();
    let mut found = Vec::new();
    for _ in 0..STEPS {
        let loss = cross_entropy(&logits, &y, Reduction::None)?; // kept loss made here
        kept.push(loss);
        found.extend(watch.step()?);
    }
    for f in &found {
        println!("{f}");
    }
    let full: Vec<&Finding> = found.iter().filter(|f| !f.reminder).collect();
    assert_eq!(full.len(), 1, "{found:#?}");
    let here = format!(
        "quiet_watches.rs:{}",
        common::line_of(SOURCE, "kept loss made here")
    );
    assert!(full[0].message.contains(&here), "{}", full[0]);
    assert!(!full[0].message.contains("cross_entropy.rs"), "{}", full[0]);
    let reminders: Vec<&Finding> = found.iter().filter(|f| f.reminder).collect();
    assert!((1..=3).contains(&reminders.len()), "{found:#?}");
    assert!(reminders[0]
        .message
        .contains("still growing, +512 B per step since step"));
    assert_eq!(lines(&found), found.len());
    Ok(())
}
