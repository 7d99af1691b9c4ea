//! Planning rows of `strata bench`: what `strata plan` costs for the mlp at batch 256
//! against running the step it plans on the CPU, and building the meta replicas against
//! building the real model and optimizer.

use std::time::{Duration, Instant};

use crate::train::{plan, Model, ModelKind, Stepper, TrainOptions};
use strata::prelude::*;

use super::{median, Row};

const BATCH: usize = 256;

fn err(e: crate::train::TrainError) -> Error {
    Error::argument("bench", e.to_string(), None)
}

/// The rows: planning a step against running it, and the replicas against the real model.
pub fn rows(quick: bool) -> Result<Vec<Row>> {
    let reps = if quick { 3 } else { 10 };
    let o = TrainOptions {
        model: ModelKind::Mlp,
        batch_size: BATCH,
        ..TrainOptions::default()
    };
    // The step on the CPU: the mlp and Adam, a batch of 256 images (values do not matter).
    let build_real = || -> Result<(Model, Stepper)> {
        let model = Model::build(o.model, None)?;
        let stepper = Stepper::new(&model, &o).map_err(err)?;
        Ok((model, stepper))
    };
    let started = Instant::now();
    let (model, mut stepper) = build_real()?;
    let mut real_build = started.elapsed();
    for _ in 1..reps {
        let started = Instant::now();
        drop(build_real()?);
        real_build = real_build.min(started.elapsed());
    }
    let x = Tensor::randn(&[BATCH, 1, 28, 28], DType::F32)?;
    let y = Tensor::zeros(&[BATCH], DType::I64)?;
    let mut failed = None;
    let run = median(reps, || {
        if let Err(e) = stepper.step(&model, &x, &y, &mut || {}) {
            failed = Some(e);
        }
    });
    if let Some(e) = failed {
        return Err(err(e));
    }
    let mut plans = Vec::new();
    for _ in 0..reps.max(3) {
        plans.push(plan(&o).map_err(err)?);
    }
    let pick = |f: fn(&strata::profile::plan::PlanReport) -> Duration| {
        let mut ts: Vec<Duration> = plans.iter().map(f).collect();
        ts.sort();
        ts[ts.len() / 2]
    };
    let (planned, setup) = (pick(|p| p.plan_time), pick(|p| p.setup_time));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok(vec![
        Row {
            name: format!("plan the mlp's training step, batch {BATCH} (meta)"),
            strata: ms(planned),
            baseline: Some(ms(run)),
            baseline_name: "the same step run on the CPU".into(),
            ratio: Some(run.as_secs_f64() / planned.as_secs_f64()),
            unit: "ms".into(),
        },
        Row {
            name: "build the mlp and Adam as meta replicas".into(),
            strata: ms(setup),
            baseline: Some(ms(real_build)),
            baseline_name: "building them on the CPU".into(),
            ratio: Some(real_build.as_secs_f64() / setup.as_secs_f64()),
            unit: "ms".into(),
        },
    ])
}
