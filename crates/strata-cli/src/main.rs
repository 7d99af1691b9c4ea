//! The `strata` command: run the demo, check conformance against PyTorch's answers.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Conform {
        /// The programs file (`{"programs": [...]}`).
        programs: PathBuf,
        /// The device every tensor a program creates is made on: `cpu`, or `meta` (shapes,
        /// layouts and allocations without values).
        #[arg(long, default_value = "cpu", value_parser = ["cpu", "meta"])]
        device: String,
        /// Run each program on a fresh caching allocator and report its events and peaks.
        #[arg(long)]
        allocations: bool,
    },
    /// Measure op costs beside a memory-copy probe and PyTorch (when python3 has torch).
    Bench {
        /// Print a Markdown table (for BENCHMARKS.md).
        #[arg(long)]
        markdown: bool,
        /// Write every row as JSON to this file (name, strata, baseline, ratio, unit).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Fewer repetitions: a smoke run, not a measurement.
        #[arg(long)]
        quick: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Settle STRATA_ALLOC_CONF before any work, so a bad setting stops the run at once.
    if let Err(e) = strata::core::routing::default_host_allocator() {
        eprintln!("strata: {e}");
        return ExitCode::FAILURE;
    }
    match cli.command.unwrap_or(Command::Demo) {
        Command::Demo => match strata_cli::demo::run(&mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("strata demo failed: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Bench {
            markdown,
            json,
            quick,
        } => {
            let rows = match strata_cli::bench::run(quick) {
                Ok(rows) => rows,
                Err(e) => {
                    eprintln!("strata bench: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if markdown {
                print!("{}", strata_cli::bench::markdown(&rows));
            } else {
                print!("{}", strata_cli::bench::table(&rows));
            }
            if let Some(path) = json {
                let text = serde_json::to_string_pretty(&rows).unwrap_or_default();
                if let Err(e) = std::fs::write(&path, text) {
                    eprintln!("strata bench: cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Command::Conform {
            programs,
            device,
            allocations,
        } => {
            let options = strata_cli::conform::RunOptions {
                device: if device == "meta" {
                    strata::prelude::Device::Meta
                } else {
                    strata::prelude::Device::Cpu
                },
                allocations,
            };
            let text = match std::fs::read_to_string(&programs) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("strata conform: cannot read {}: {e}", programs.display());
                    return ExitCode::from(2);
                }
            };
            match strata_cli::conform::run_document_with(&text, options) {
                Ok(results) => {
                    println!("{results}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("strata conform: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
