//! Runs every program in `examples/`: each asserts what it shows with the allocator's
//! statistics. One test runs them in turn, since they read process-wide memory counters.

#[path = "../examples/accumulate_features.rs"]
mod accumulate_features;
#[path = "../examples/chunked_out.rs"]
mod chunked_out;
#[path = "../examples/double_buffered.rs"]
mod double_buffered;
#[path = "../examples/drop_order.rs"]
mod drop_order;
#[path = "../examples/eval_loop.rs"]
mod eval_loop;
#[path = "../examples/preallocated_out.rs"]
mod preallocated_out;
#[path = "../examples/training_loop.rs"]
mod training_loop;

#[test]
fn every_example_holds() -> Result<(), Box<dyn std::error::Error>> {
    drop_order::main()?;
    preallocated_out::main()?;
    chunked_out::main()?;
    eval_loop::main()?;
    training_loop::main()?;
    accumulate_features::main()?;
    double_buffered::main()?;
    Ok(())
}
