//! The progress display of `strata train`: a bar per epoch on stderr.

/// Progress bars on stderr: one per epoch, with the loss, samples per second and memory.
#[derive(Default)]
pub(crate) struct Bars {
    bar: Option<indicatif::ProgressBar>,
}

impl strata_cli::train::Progress for Bars {
    fn epoch_started(&mut self, epoch: usize, epochs: usize, batches: usize) {
        let bar = indicatif::ProgressBar::new(batches as u64);
        let style =
            indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style.progress_chars("=> "));
        bar.set_prefix(format!("epoch {epoch}/{epochs}"));
        self.bar = Some(bar);
    }

    fn batch_done(
        &mut self,
        loss: Option<f32>,
        samples_per_second: f64,
        allocated: usize,
        peak: usize,
    ) {
        if let Some(bar) = &self.bar {
            let loss = loss.map_or_else(|| "-".to_owned(), |l| format!("{l:.4}"));
            bar.set_message(format!(
                "loss {loss} · {samples_per_second:.0} samples/s · memory {} (peak {})",
                strata::alloc::caching::format_size(allocated),
                strata::alloc::caching::format_size(peak)
            ));
            bar.inc(1);
        }
    }

    fn epoch_done(&mut self, line: &str) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        eprintln!("{line}");
    }
}
