//! `strata eval`: the test accuracy and loss of saved weights, or the gpt's validation loss.

use std::process::ExitCode;

use crate::cli::args::EvalArgs;
use crate::cli::commands::shared::{options, write_json};

/// Evaluates the weights `--load` names on the test set and prints the accuracy and loss
/// (for the gpt, the mean cross-entropy over the validation protocol's windows).
pub(crate) fn run(args: EvalArgs) -> ExitCode {
    let EvalArgs { common, load } = args;
    let o = options(&common);
    let run = || -> strata_cli::train::Result<(f64, f64)> {
        let model = strata_cli::train::model_with_weights(&o, Some(&load))?;
        let test = strata_cli::train::test_set(&o)?;
        strata_cli::train::evaluate(model.as_ref(), test, &o)
    };
    match run() {
        Ok((accuracy, loss)) => {
            let value = if o.model.is_language_model() {
                println!("{}: val loss {loss:.4}", o.model.name());
                serde_json::json!({"model": o.model.name(), "val_loss": loss})
            } else {
                println!(
                    "{}: test accuracy {:.2}%, test loss {loss:.4}",
                    o.model.name(),
                    100.0 * accuracy
                );
                serde_json::json!({"model": o.model.name(), "test_accuracy": accuracy, "test_loss": loss})
            };
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
