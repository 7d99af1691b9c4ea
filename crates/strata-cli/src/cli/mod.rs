//! The `strata` binary's own code: its arguments, progress display, size parsing and the
//! driver of each subcommand (the work itself is in the `strata_cli` library).

pub(crate) mod args;
pub(crate) mod commands;
pub(crate) mod progress;
pub(crate) mod size;
