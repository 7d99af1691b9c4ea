//! `strata eval`: the test accuracy and loss of saved weights.

use std::process::ExitCode;

use crate::cli::args::EvalArgs;
use crate::cli::commands::shared::{options, write_json};

/// Evaluates the weights `--load` names on the test set and prints the accuracy and loss.
pub(crate) fn run(args: EvalArgs) -> ExitCode {
    let EvalArgs { common, load } = args;
    let o = options(&common);
    let run = || -> strata_cli::train::Result<(f64, f64)> {
        let model = strata_cli::train::model_with_weights(o.model, Some(&load))?;
        let test = strata_cli::train::test_set(&o)?;
        strata_cli::train::evaluate(model.as_ref(), test, &o)
    };
    match run() {
        Ok((accuracy, loss)) => {
            println!(
                "{}: test accuracy {:.2}%, test loss {loss:.4}",
                o.model.name(),
                100.0 * accuracy
            );
            let value = serde_json::json!({"model": o.model.name(), "test_accuracy": accuracy, "test_loss": loss});
            match write_json(&common.report_json, &value) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("strata eval: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("strata eval: {e}");
            ExitCode::FAILURE
        }
    }
}
