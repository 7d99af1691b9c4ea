//! Data-loading rows of `strata bench`: batches per second from Fashion-MNIST's test split
//! (batches of 256, normalised) with 0, 1 and 2 workers (prefetch 2) against a plain loop
//! that builds the same batches on the caller's thread, with no extra work per sample, with
//! 20 µs of it, and with `STRATA_BENCH_SAMPLE_US` µs when that is set; and how much a
//! prefetching loader hides of a training step with synthetic compute (loader and step
//! apart, summed, against the two together). The kernels' pool and the workers share the
//! machine's cores: the rows say how many threads each side had.

use std::sync::Arc;
use std::time::{Duration, Instant};

use strata::data::transform::Normalize;
use strata::data::{
    Collate, DataLoader, Dataset, FashionMnist, Field, IntoBatch, LoaderOptions, SampleContext,
    Split,
};
use strata::prelude::*;

use super::{median, Row};

const BATCH: usize = 256;

/// A dataset that spends `cost` of extra CPU time on every sample (decoding, augmenting).
struct Costly {
    inner: Arc<dyn Dataset>,
    cost: Duration,
}

impl Dataset for Costly {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn fields(&self) -> Vec<Field> {
        self.inner.fields()
    }
    fn write(&self, i: usize, out: &[Tensor], ctx: &mut SampleContext) -> strata::data::Result<()> {
        let until = Instant::now() + self.cost;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        self.inner.write(i, out, ctx)
    }
}

fn data_err(e: strata::data::DataError) -> Error {
    Error::argument("bench", e.to_string(), None)
}

/// Batches per second of one epoch with `workers` workers (0: built on the caller's thread).
fn loader_rate(data: &Arc<dyn Dataset>, workers: usize) -> Result<f64> {
    let mut loader = DataLoader::new(
        data.clone(),
        LoaderOptions {
            batch_size: BATCH,
            num_workers: workers,
            prefetch_factor: (workers > 0).then_some(2),
            ..LoaderOptions::default()
        },
    )
    .map_err(data_err)?;
    let start = Instant::now();
    let mut n = 0;
    for b in loader.epoch().map_err(data_err)? {
        drop(b.map_err(data_err)?);
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Batches per second of a plain loop building the same batches on this thread.
fn plain_rate(data: &Arc<dyn Dataset>) -> Result<f64> {
    let start = Instant::now();
    let mut n = 0;
    let indices: Vec<usize> = (0..data.len()).collect();
    for chunk in indices.chunks(BATCH) {
        drop(IntoBatch.collate(&**data, chunk, 0, 0).map_err(data_err)?);
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// The data rows, or none (with a note on stderr) when Fashion-MNIST is not installed.
pub fn rows(quick: bool) -> Result<Vec<Row>> {
    let test = match FashionMnist::load(Split::Test) {
        Ok(t) => t.normalized(Normalize::FASHION_MNIST),
        Err(e) => {
            eprintln!("strata bench: no data-loading rows: {e}");
            return Ok(Vec::new());
        }
    };
    let base: Arc<dyn Dataset> = Arc::new(test);
    let threads = strata::core::num_threads();
    let mut rows = Vec::new();
    // STRATA_BENCH_SAMPLE_US adds a row set at that extra per-sample cost.
    let mut costs: Vec<u64> = if quick { vec![0] } else { vec![0, 20] };
    if let Some(us) = std::env::var("STRATA_BENCH_SAMPLE_US")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        costs.push(us);
    }
    for us in costs {
        let data: Arc<dyn Dataset> = Arc::new(Costly {
            inner: base.clone(),
            cost: Duration::from_micros(us),
        });
        let plain = plain_rate(&data)?;
        for workers in [0usize, 1, 2] {
            let rate = loader_rate(&data, workers)?;
            rows.push(Row {
                name: format!(
                    "Fashion-MNIST loader, batch {BATCH}, {us} µs/sample extra, {workers} workers \
                     (kernel pool {threads} threads)"
                ),
                strata: rate,
                baseline: Some(plain),
                baseline_name: "plain loop on the caller's thread".into(),
                ratio: Some(rate / plain),
                unit: "batches/s".into(),
            });
        }
    }
    for workers in [1, 2] {
        rows.push(overlap(&base, workers, quick)?);
    }
    Ok(rows)
}

/// A step of synthetic compute (two 384² products) per batch: the loader with `workers`
/// workers and the step apart, summed, against the two together.
fn overlap(base: &Arc<dyn Dataset>, workers: usize, quick: bool) -> Result<Row> {
    let data: Arc<dyn Dataset> = Arc::new(Costly {
        inner: base.clone(),
        cost: Duration::from_micros(10),
    });
    let w = Tensor::rand(&[384, 384], DType::F32)?;
    let step = |x: &Tensor| -> Result<()> {
        let flat = x.reshape(&[BATCH as i64, 784])?.narrow(1, 0, 384)?;
        drop(flat.matmul(&w)?.matmul(&w)?);
        Ok(())
    };
    let batches = if quick { 4 } else { 39 };
    let x = Tensor::rand(&[BATCH, 1, 28, 28], DType::F32)?;
    let reps = if quick { 1 } else { 3 };
    let mut err = None;
    let mut record = |r: Result<()>| {
        if let Err(e) = r {
            err = Some(e);
        }
    };
    let alone_step = median(reps, || record((0..batches).try_for_each(|_| step(&x))));
    let run_loader = |with_step: bool| -> Result<()> {
        let mut loader = DataLoader::new(
            data.clone(),
            LoaderOptions {
                batch_size: BATCH,
                num_workers: workers,
                prefetch_factor: Some(2),
                ..LoaderOptions::default()
            },
        )
        .map_err(data_err)?;
        for b in loader.epoch().map_err(data_err)?.take(batches) {
            let b = b.map_err(data_err)?;
            if with_step {
                step(&b.tensors[0])?;
            }
        }
        Ok(())
    };
    let alone_loader = median(reps, || record(run_loader(false)));
    let together = median(reps, || record(run_loader(true)));
    if let Some(e) = err {
        return Err(e);
    }
    let sum = (alone_step + alone_loader).as_secs_f64() * 1e3;
    let both = together.as_secs_f64() * 1e3;
    Ok(Row {
        name: format!(
            "loader ({workers} workers, prefetch 2) + synthetic step, {batches} batches (kernel \
             pool {} threads)",
            strata::core::num_threads()
        ),
        strata: both,
        baseline: Some(sum),
        baseline_name: "loader alone + step alone".into(),
        ratio: Some(sum / both),
        unit: "ms".into(),
    })
}
