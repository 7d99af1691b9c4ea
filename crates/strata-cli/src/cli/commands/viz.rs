//! `strata viz`: write a snapshot as the memory page (and, with `--png`, a timeline image).

use std::io::Write as _;
use std::process::ExitCode;

use strata_cli::viz::VizOptions;

use crate::cli::args::VizArgs;
use crate::cli::commands::shared::{check_output, load};

/// Writes the snapshot's page to `--output` and says what it holds.
pub(crate) fn run(args: VizArgs) -> ExitCode {
    let VizArgs {
        snapshot,
        output,
        png,
        serve,
        exact_lives,
        window,
    } = args;
    let options = VizOptions { exact_lives };
    // Where the page and the image go is checked before the snapshot, which may take long
    // to read.
    for (flag, path) in [
        ("--output", Some(output.as_path())),
        ("--png", png.as_deref()),
    ] {
        if let Err(e) = check_output(path) {
            eprintln!("strata viz: {flag}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let Some(snap) = load(&snapshot, "viz", window) else {
        return ExitCode::FAILURE;
    };
    let title = snapshot
        .file_name()
        .map_or_else(|| "snapshot".into(), |n| n.to_string_lossy().into_owned());
    if let Some(addr) = serve {
        let ready = |at: std::net::SocketAddr| {
            println!("serving the page on http://{at}/ (stop with Ctrl-C)");
            // The address goes out at once, for whoever waits on it.
            let _ = std::io::stdout().flush();
        };
        return match strata_cli::viz::serve(&snap, &title, addr, &options, ready) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("strata viz: --serve: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match strata_cli::viz::write(&snap, &title, &output, png.as_deref(), &options) {
        Ok(data) => {
            println!(
                "wrote {} ({} allocations{}, peak {} at entry {})",
                output.display(),
                data.total_lives,
                if data.complete {
                    ""
                } else {
                    "; the timeline drawn from its summary"
                },
                strata::alloc::caching::format_size(data.peak_bytes as usize),
                data.peak_entry
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("strata viz: {e}");
            ExitCode::FAILURE
        }
    }
}
