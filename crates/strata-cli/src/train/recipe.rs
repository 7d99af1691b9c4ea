//! The gpt's recipe, nanoGPT's `shakespeare_char` on a CPU: AdamW with betas (0.9, 0.99),
//! weight decay on the parameters of two or more dimensions only, a learning rate warmed
//! up linearly for 100 steps and then decayed along a cosine to a tenth of its peak at step
//! 2,000, and gradients clipped to a total norm of 1.

use strata::core::Tensor;
use strata::nn::optim::ParamGroup;

/// Steps of linear warm-up.
pub const WARMUP_STEPS: usize = 100;
/// The step where the cosine reaches the minimum learning rate.
pub const LR_DECAY_STEPS: usize = 2_000;
/// The steps a gpt run takes unless `--steps` says otherwise.
pub const DEFAULT_STEPS: usize = 2_000;
/// AdamW's moment decay rates.
pub const BETAS: (f64, f64) = (0.9, 0.99);
/// Weight decay of the matrices and embeddings.
pub const WEIGHT_DECAY: f64 = 0.1;
/// The total gradient norm is clipped to this.
pub const CLIP_NORM: f64 = 1.0;

/// nanoGPT's `get_lr` for step `it` (from 0) and peak learning rate `peak`, with its
/// minimum a tenth of the peak: `peak·(it+1)/(warmup+1)` while `it < warmup`, then
/// `min + ½(1 + cos(π·(it − warmup)/(decay − warmup)))·(peak − min)` up to the decay
/// step, and `min` after it.
pub fn learning_rate(it: usize, peak: f64) -> f64 {
    let min = peak / 10.0;
    if it < WARMUP_STEPS {
        return peak * (it + 1) as f64 / (WARMUP_STEPS + 1) as f64;
    }
    if it > LR_DECAY_STEPS {
        return min;
    }
    let ratio = (it - WARMUP_STEPS) as f64 / (LR_DECAY_STEPS - WARMUP_STEPS) as f64;
    let coeff = 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos());
    min + coeff * (peak - min)
}

/// nanoGPT's two parameter groups: the parameters of two or more dimensions (matrices and
/// embeddings, the tied head once) decayed by `weight_decay`, the others (LayerNorm
/// weights) not at all.
pub fn decay_groups(params: Vec<Tensor>, weight_decay: f64) -> Vec<ParamGroup> {
    let (decay, rest): (Vec<Tensor>, Vec<Tensor>) = params.into_iter().partition(|p| p.dim() >= 2);
    vec![
        ParamGroup::new(decay).weight_decay(weight_decay),
        ParamGroup::new(rest).weight_decay(0.0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_nanogpts() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
        assert!(close(learning_rate(0, 1e-3), 1e-3 / 101.0));
        assert!(close(learning_rate(99, 1e-3), 1e-3 * 100.0 / 101.0));
        assert!(close(learning_rate(100, 1e-3), 1e-3));
        // Halfway through the decay the cosine term is ½.
        assert!(close(learning_rate(1050, 1e-3), 1e-4 + 0.5 * 9e-4));
        assert!(close(learning_rate(2000, 1e-3), 1e-4));
        assert!(close(learning_rate(2500, 1e-3), 1e-4));
    }
}
