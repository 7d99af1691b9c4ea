//! `strata bench`: measure op costs and print them as a table (or Markdown, or JSON).

use std::process::ExitCode;

use crate::cli::args::BenchArgs;

/// Runs the benchmarks, prints the table and writes the rows to `--json` when given.
pub(crate) fn run(args: BenchArgs) -> ExitCode {
    let BenchArgs {
        markdown,
        json,
        quick,
        only,
    } = args;
    let rows = match only {
        Some(group) => strata_cli::bench::run_group(&group, quick),
        None => strata_cli::bench::run(quick),
    };
    let rows = match rows {
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
