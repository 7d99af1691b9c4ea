//! The profiler on a small training step: every op with memory columns, user ranges, the
//! table, grouping and sorting, the schedule, and the Chrome trace's structure.

mod common;

use strata_core::{DType, Tensor};
use strata_nn::optim::{Optimizer, Sgd};
use strata_nn::{Module, Sequential};
use strata_profile::{
    profile, record_function, validate_chrome_trace, GroupBy, ProfileOptions, Profiler, Schedule,
    SortKey,
};

fn model() -> strata_core::Result<Sequential> {
    common::mlp(64, 128, 10)
}

fn train_step(m: &Sequential, opt: &mut Optimizer, x: &Tensor) -> strata_core::Result<f64> {
    let loss = {
        let _f = record_function("forward");
        {
            let y = m.call(x)?;
            y.mul(&y)?.mean(None, false)?
        }
    };
    {
        let _b = record_function("backward");
        loss.backward()?;
    }
    opt.step()?;
    opt.zero_grad(true)?;
    loss.item()
}

#[test]
fn a_training_step_shows_every_op_with_its_memory() -> strata_core::Result<()> {
    let _serial = common::serial();
    let m = model()?;
    let mut opt = Optimizer::sgd(m.parameters(), Sgd::default())?;
    let x = Tensor::randn(&[32, 64], DType::F32)?;
    let (r, prof) = profile(ProfileOptions::default(), || train_step(&m, &mut opt, &x));
    r?;
    let avg = prof.key_averages();
    let table = avg.table(SortKey::SelfCpuMemoryUsage, 30);
    println!("{table}");
    for name in ["forward", "backward", "linear", "mean"] {
        assert!(avg.row(name).is_some(), "no row {name} in\n{table}");
    }
    // The forward range holds the activations it made: allocated and still alive at its end.
    let fwd = avg.row("forward").expect("forward row");
    assert!(fwd.cpu_memory_usage > 0);
    assert!(fwd.cpu_time_total >= fwd.self_cpu_time_total);
    // A linear layer's output: 32 x 128 floats rounded to 512 bytes by the allocator.
    let linear = &prof
        .events()
        .iter()
        .find(|e| {
            e.name == "linear" && e.inputs.first().map(|i| i.shape.as_slice()) == Some(&[32, 64])
        })
        .expect("the first linear");
    assert!(linear.allocated >= 32 * 128 * 4);
    assert!(linear.peak >= 32 * 128 * 4);
    // Sorted by self memory, largest first.
    let sorted = avg.sorted("self_cpu_memory_usage".parse().expect("known key"));
    assert!(sorted
        .windows(2)
        .all(|w| w[0].self_cpu_memory_usage >= w[1].self_cpu_memory_usage));
    let calls = avg.sorted("calls".parse().expect("known key"));
    assert!(calls.windows(2).all(|w| w[0].count >= w[1].count));
    Ok(())
}

#[test]
fn grouping_by_shape_splits_rows() -> strata_core::Result<()> {
    let _serial = common::serial();
    let a = Tensor::ones(&[8, 8], DType::F32)?;
    let b = Tensor::ones(&[16, 16], DType::F32)?;
    let (r, prof) = profile(ProfileOptions::default(), || -> strata_core::Result<()> {
        let _ = a.exp()?;
        let _ = a.exp()?;
        let _ = b.exp()?;
        Ok(())
    });
    r?;
    let by_name = prof.key_averages();
    assert_eq!(by_name.row("exp").map(|r| r.count), Some(3));
    let by_shape = prof.key_averages_by(GroupBy {
        input_shapes: true,
        scope: false,
    });
    let exps: Vec<_> = by_shape.rows().iter().filter(|r| r.name == "exp").collect();
    assert_eq!(exps.len(), 2);
    assert!(exps
        .iter()
        .any(|r| r.input_shapes == "[[8, 8]]" && r.count == 2));
    assert!(by_shape.table(SortKey::Count, 10).contains("Input Shapes"));
    Ok(())
}

#[test]
fn scopes_show_in_events_and_rows() -> strata_core::Result<()> {
    let _serial = common::serial();
    let m = model()?;
    let x = Tensor::randn(&[4, 64], DType::F32)?;
    let (r, prof) = profile(ProfileOptions::default(), || m.call(&x));
    r?;
    let scopes: Vec<&str> = prof
        .events()
        .iter()
        .filter(|e| e.name == "linear")
        .map(|e| e.scope)
        .collect();
    assert_eq!(scopes, ["0", "2"]);
    let rows = prof.key_averages_by(GroupBy {
        input_shapes: false,
        scope: true,
    });
    assert!(rows
        .rows()
        .iter()
        .any(|r| r.name == "linear" && r.scope == "2"));
    Ok(())
}

#[test]
fn a_schedule_keeps_only_the_active_steps() -> strata_core::Result<()> {
    let _serial = common::serial();
    let m = model()?;
    let mut opt = Optimizer::sgd(m.parameters(), Sgd::default())?;
    let x = Tensor::randn(&[8, 64], DType::F32)?;
    // Step 0 skipped, 1 waits, 2 warms up, 3 and 4 recorded, then idle.
    let schedule = Schedule::new(1, 1, 2).skip_first(1);
    let mut prof = Profiler::start(ProfileOptions::default().schedule(schedule));
    for _ in 0..8 {
        train_step(&m, &mut opt, &x)?;
        prof.step();
    }
    let p = prof.finish();
    let avg = p.key_averages();
    assert_eq!(avg.row("forward").map(|r| r.count), Some(2));
    assert_eq!(avg.row("ProfilerStep*").map(|r| r.count), Some(2));
    assert_eq!(avg.row("linear").map(|r| r.count), Some(4));
    Ok(())
}

#[test]
fn the_chrome_trace_follows_the_format() -> Result<(), Box<dyn std::error::Error>> {
    let _serial = common::serial();
    let m = model()?;
    let mut opt = Optimizer::sgd(m.parameters(), Sgd::default())?;
    let x = Tensor::randn(&[16, 64], DType::F32)?;
    let (r, prof) = profile(ProfileOptions::default(), || -> strata_core::Result<()> {
        // A second thread: its ops are on a track of their own.
        std::thread::scope(|s| {
            let h = s.spawn(|| Tensor::ones(&[1000], DType::F32)?.exp());
            let r = train_step(&m, &mut opt, &x);
            h.join().expect("thread").map(|_| ())?;
            r.map(|_| ())
        })
    });
    r?;
    let json = prof.chrome_trace();
    let summary = validate_chrome_trace(&json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary.durations, prof.events().len());
    assert!(summary.counters > 0, "memory counter track");
    assert_eq!(summary.threads, 2);
    assert!(json.contains("\"Memory (cpu)\""));
    let dir = std::env::temp_dir().join(format!("strata-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("trace.json");
    prof.export_chrome_trace(&path)?;
    let back = std::fs::read_to_string(&path)?;
    assert!(validate_chrome_trace(&back).is_ok());
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[test]
fn memory_is_charged_to_the_thread_that_allocated_it() -> strata_core::Result<()> {
    let _serial = common::serial();
    // A loader-like thread allocates 4 MiB while the main thread runs a small op: the
    // small op must not be charged for the other thread's bytes.
    let (r, prof) = profile(ProfileOptions::default(), || -> strata_core::Result<()> {
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| -> strata_core::Result<()> {
            let worker = s.spawn(move || -> strata_core::Result<Tensor> {
                let _ = go_rx.recv();
                let t = Tensor::zeros(&[1 << 20], DType::F32)?;
                let _ = done_tx.send(());
                Ok(t)
            });
            let _range = record_function("step");
            let small = Tensor::ones(&[16], DType::F32)?;
            let _ = go_tx.send(());
            let _ = done_rx.recv();
            let _ = small.exp()?;
            drop(_range);
            worker.join().expect("worker")?;
            Ok(())
        })
    });
    r?;
    let step = prof
        .events()
        .iter()
        .find(|e| e.name == "step")
        .expect("step range");
    assert!(step.allocated < 4096, "charged {} bytes", step.allocated);
    let zeros = prof
        .events()
        .iter()
        .find(|e| e.name == "zeros" && e.thread != step.thread)
        .expect("the worker's zeros");
    assert_eq!(zeros.allocated, 4 << 20);
    Ok(())
}
