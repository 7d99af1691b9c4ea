//! The protocol's autocast steps: `autocast {dtype="bf16"}` opens a CPU autocast region and
//! `autocast_exit` closes the innermost one. Regions nest apart from grad modes.

use strata::core::autocast::{autocast, AutocastGuard};
use strata::prelude::DType;

use super::args::Args;
use super::ProgramState;

impl ProgramState {
    /// Runs `op` when it is an autocast step; `None` for every other op.
    pub(super) fn autocast_step(
        &mut self,
        op: &str,
        args: &Args<'_>,
    ) -> Option<Result<(), String>> {
        match op {
            "autocast" => Some(self.open_autocast(args)),
            "autocast_exit" => Some(self.close_autocast()),
            _ => None,
        }
    }

    fn open_autocast(&mut self, args: &Args<'_>) -> Result<(), String> {
        let dtype = match args.str_or("dtype", "bf16")? {
            "bf16" => DType::BF16,
            "f16" => DType::F16,
            other => return Err(format!("autocast dtype must be bf16 or f16, not {other}")),
        };
        let guard = autocast(dtype).map_err(|e| e.to_string())?;
        self.regions.push(guard);
        Ok(())
    }

    fn close_autocast(&mut self) -> Result<(), String> {
        let closed: AutocastGuard = self
            .regions
            .pop()
            .ok_or("autocast_exit with no autocast region open")?;
        drop(closed);
        Ok(())
    }
}
