//! The samples a character-level language model trains and is evaluated on: `(x, y)`
//! windows of `block` tokens, `y` being `x` shifted by one (the next token of each
//! position), both i64 `[block]`.

use std::sync::Arc;

use strata_core::{DType, Tensor};

use crate::dataset::{Dataset, Field, SampleContext};
use crate::datasets::check_index;
use crate::error::{DataError, Result};

/// The two fields of a window.
fn window_fields(block: usize) -> Vec<Field> {
    vec![
        Field::new("x", &[block], DType::I64),
        Field::new("y", &[block], DType::I64),
    ]
}

/// Writes the window starting at token `start` into `out` (`x`, then `y`).
fn write_window(tokens: &[u8], block: usize, start: usize, out: &[Tensor]) -> Result<()> {
    let take = |from: usize| -> Vec<i64> {
        tokens[from..from + block]
            .iter()
            .map(|&t| i64::from(t))
            .collect()
    };
    out[0].copy_(&Tensor::from_vec(take(start), &[block])?)?;
    out[1].copy_(&Tensor::from_vec(take(start + 1), &[block])?)?;
    Ok(())
}

/// `Err` unless `tokens` hold at least one window of `block` tokens and its next token.
fn check_fits(what: &'static str, tokens: &[u8], block: usize) -> Result<()> {
    if block == 0 || tokens.len() <= block {
        return Err(DataError::argument(
            what,
            format!(
                "a window of {block} tokens and its next token need at least {} tokens, the \
                 text has {} (and the block must not be 0)",
                block + 1,
                tokens.len()
            ),
        ));
    }
    Ok(())
}

/// Training windows at random starts, as nanoGPT's `get_batch`: sample `i` of an epoch
/// starts at a uniform position in `0..n − block`, drawn from the sample's own generator (the
/// loader's seed, the epoch and `i`), so the same batches come out for any worker count.
/// `len` is how many windows an epoch has (steps × batch size for a run counted in steps).
#[derive(Debug, Clone)]
pub struct RandomWindows {
    tokens: Arc<[u8]>,
    block: usize,
    len: usize,
}

impl RandomWindows {
    /// `len` random windows of `block` tokens over `tokens`.
    pub fn new(tokens: Arc<[u8]>, block: usize, len: usize) -> Result<RandomWindows> {
        check_fits("RandomWindows", &tokens, block)?;
        Ok(RandomWindows { tokens, block, len })
    }

    /// Where sample `index` of `ctx`'s epoch starts.
    pub fn start(&self, ctx: &mut SampleContext) -> usize {
        let room = (self.tokens.len() - self.block) as u64;
        // The draw is below `room`, a usize.
        ctx.generator.next_below(room) as usize
    }
}

impl Dataset for RandomWindows {
    fn len(&self) -> usize {
        self.len
    }

    fn fields(&self) -> Vec<Field> {
        window_fields(self.block)
    }

    fn write(&self, index: usize, out: &[Tensor], ctx: &mut SampleContext) -> Result<()> {
        check_index("RandomWindows", index, self.len)?;
        let start = self.start(ctx);
        write_window(&self.tokens, self.block, start, out)
    }
}

/// Evaluation windows at fixed starts `0, block, 2·block, …` while a window and its next
/// token fit, the first `max` of them (strata's validation protocol for the gpt model:
/// 256 windows of 64).
#[derive(Debug, Clone)]
pub struct EvalWindows {
    tokens: Arc<[u8]>,
    block: usize,
    len: usize,
}

impl EvalWindows {
    /// At most `max` windows of `block` tokens over `tokens`.
    pub fn new(tokens: Arc<[u8]>, block: usize, max: usize) -> Result<EvalWindows> {
        check_fits("EvalWindows", &tokens, block)?;
        // Start s fits when s + block + 1 <= n: s = i·block for i in 0..=(n − block − 1)/block.
        let fitting = (tokens.len() - block - 1) / block + 1;
        Ok(EvalWindows {
            tokens,
            block,
            len: fitting.min(max),
        })
    }
}

impl Dataset for EvalWindows {
    fn len(&self) -> usize {
        self.len
    }

    fn fields(&self) -> Vec<Field> {
        window_fields(self.block)
    }

    fn write(&self, index: usize, out: &[Tensor], _: &mut SampleContext) -> Result<()> {
        check_index("EvalWindows", index, self.len)?;
        write_window(&self.tokens, self.block, index * self.block, out)
    }
}
