//! The `strata` command: run the demo, check conformance against PyTorch's answers.
//!
//! This file is the command table: the subcommands, and the dispatch of each to its driver
//! in `cli::commands`; their arguments are in `cli::args`.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cli::args::{
    BenchArgs, ConformArgs, EvalArgs, ExplainArgs, PlanArgs, ReplayArgs, SampleArgs, SummaryArgs,
    TrainArgs, VizArgs,
};
use crate::cli::commands;

/// strata: PyTorch's tensor memory model in Rust, with every byte accounted for.
#[derive(Parser)]
#[command(name = "strata", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Show views sharing storage, the version counter, and memory returned on drop.
    Demo,
    /// Run conformance programs and print the results JSON on stdout.
    Conform(ConformArgs),
    /// Measure op costs beside a memory-copy probe and PyTorch (when python3 has torch).
    Bench(BenchArgs),
    /// Train a model (Fashion-MNIST's classifiers, or the gpt on Shakespeare) and report
    /// accuracy or validation loss, time and memory.
    Train(Box<TrainArgs>),
    /// Generate text with a trained gpt and its key/value cache, and report the memory.
    Sample(SampleArgs),
    /// Replay a snapshot's recorded history under other allocator settings (strata's or
    /// PyTorch's `_dump_snapshot` pickles, or strata's JSON).
    Replay(ReplayArgs),
    /// Explain an out-of-memory (or a peak) from a snapshot: the moment's figures,
    /// fragmentation, who held the memory, and fixes verified by replay.
    Explain(ExplainArgs),
    /// Write a snapshot as one self-contained HTML page (timeline by category, scope or
    /// site; segments at any moment; the largest holders at the peak).
    Viz(VizArgs),
    /// Predict the memory of `strata train`'s measured step without running it, or with
    /// `--fit` find the largest batch size that holds under `--memory-limit`.
    Plan(PlanArgs),
    /// Train briefly (one epoch on 2048 images) and print the allocator's memory summary.
    Summary(SummaryArgs),
    /// Report the test accuracy and loss of saved weights (PyTorch's key names).
    Eval(EvalArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Settle STRATA_ALLOC_CONF before any work, so a bad setting stops the run at once.
    if let Err(e) = strata::core::routing::default_host_allocator() {
        eprintln!("strata: {e}");
        return ExitCode::FAILURE;
    }
    let command = cli.command.unwrap_or(Command::Demo);
    if let Command::Eval(EvalArgs { common, .. }) | Command::Summary(SummaryArgs { common }) =
        &command
    {
        if commands::shared::batch_size_auto(common) {
            eprintln!("strata: --batch-size auto is for train and plan; give a number");
            return ExitCode::FAILURE;
        }
    }
    match command {
        Command::Demo => commands::demo::run(),
        Command::Conform(args) => commands::conform::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Train(args) => commands::train::run(*args),
        Command::Sample(args) => commands::sample::run(args),
        Command::Replay(args) => commands::replay::run(args),
        Command::Explain(args) => commands::explain::run(args),
        Command::Viz(args) => commands::viz::run(args),
        Command::Plan(args) => commands::plan::run(args),
        Command::Summary(args) => commands::summary::run(args),
        Command::Eval(args) => commands::eval::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
