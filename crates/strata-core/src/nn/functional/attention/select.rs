//! Which implementation computes an attention: PyTorch's CPU rule (flash where it can run,
//! else math), restricted by [`sdpa_kernel`].

use std::cell::Cell;

use super::SdpaOptions;
use crate::backend::for_device;
use crate::{DType, Error, Result, Tensor};

/// The implementations of `scaled_dot_product_attention` on the CPU (PyTorch's
/// `torch.nn.attention.SDPBackend` members that run there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SdpBackend {
    /// The reference composition: the scores `[.., L, S]` materialised (memory grows with
    /// L·S), any inputs.
    Math,
    /// The tiled kernel with an online softmax: memory linear in L and S, for the inputs
    /// PyTorch's fused CPU path takes (see [`sdpa_kernel`]).
    Flash,
}

impl SdpBackend {
    /// This backend's bit in the enabled set.
    fn bit(self) -> u8 {
        match self {
            SdpBackend::Math => 1,
            SdpBackend::Flash => 2,
        }
    }
}

thread_local! {
    /// The implementations this thread may use (both unless [`sdpa_kernel`] says otherwise).
    static ENABLED: Cell<u8> = const { Cell::new(3) };
}

/// Runs `f` with `scaled_dot_product_attention` restricted to `backends` on this thread, as
/// `with torch.nn.attention.sdpa_kernel(backends):`; the previous choice is restored after
/// (also when `f` panics). Inside, an attention that no listed backend can run is an `Err`
/// that names why the fused path could not (with `[Flash]` alone: 3-d or 4-d inputs, no
/// dropout, equal head dimensions, ...).
///
/// Without a restriction, attention follows PyTorch's CPU rule: the fused (flash) path when
/// - query, key and value are all 4-d `[B, heads, L, E]`, or all 3-d (taken as one batch
///   entry, as PyTorch does);
/// - `dropout_p` is 0;
/// - the batch sizes are equal, and key and value have the query's heads, or one head, or
///   with `enable_gqa` a divisor of them;
/// - a mask, if any, does not require grad and is 2-d `[L|1, S|1]` or 4-d
///   `[B|1, heads|1, L|1, S|1]` (3-d with 3-d inputs);
/// - E is the same for query, key and value, no size is 0, and every last dimension is
///   contiguous;
/// - the dtype is f32, f64, bf16 or f16, and the device has the fused kernel (the CPU);
///
/// else the math path.
///
/// ```
/// use strata_core::nn::functional::{
///     scaled_dot_product_attention, scaled_dot_product_attention_with, sdpa_kernel,
///     SdpBackend, SdpaOptions,
/// };
/// use strata_core::{DType, Tensor};
/// let q = Tensor::randn(&[1, 2, 16, 8], DType::F32)?;
/// let flash = sdpa_kernel(&[SdpBackend::Flash], || scaled_dot_product_attention(&q, &q, &q))?;
/// let math = sdpa_kernel(&[SdpBackend::Math], || scaled_dot_product_attention(&q, &q, &q))?;
/// let gap = flash.sub(&math)?.abs()?.amax(None, false)?.item::<f32>()?;
/// assert!(gap < 1e-5);
/// // Dropout has no fused path: asking for flash alone is an error saying so.
/// let opts = SdpaOptions { dropout_p: 0.1, ..Default::default() };
/// let err = sdpa_kernel(&[SdpBackend::Flash], || {
///     scaled_dot_product_attention_with(&q, &q, &q, &opts)
/// })
/// .unwrap_err();
/// assert!(err.to_string().contains("dropout"));
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn sdpa_kernel<R>(backends: &[SdpBackend], f: impl FnOnce() -> R) -> R {
    let set = backends.iter().fold(0, |s, b| s | b.bit());
    let previous = ENABLED.with(|e| e.replace(set));
    let _restore = Restore(previous);
    f()
}

/// Restores the enabled set when dropped.
struct Restore(u8);

impl Drop for Restore {
    fn drop(&mut self) {
        ENABLED.with(|e| e.set(self.0));
    }
}

/// The backend an attention runs on.
pub(super) fn choose(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &SdpaOptions,
) -> Result<SdpBackend> {
    let enabled = ENABLED.with(Cell::get);
    let refusal = flash_refusal(q, k, v, opts);
    if enabled & SdpBackend::Flash.bit() != 0 && refusal.is_none() {
        return Ok(SdpBackend::Flash);
    }
    if enabled & SdpBackend::Math.bit() != 0 {
        return Ok(SdpBackend::Math);
    }
    let message = match (enabled, refusal) {
        (0, _) => "no implementation is enabled (sdpa_kernel was given no backend)".to_owned(),
        (_, Some(why)) => format!("the flash path, the only one enabled, cannot run: {why}"),
        (_, None) => "no enabled implementation can run these inputs".to_owned(),
    };
    Err(Error::Unsupported { op, message })
}

/// Why PyTorch's CPU rule keeps these operands off the fused path, or `None` when they may
/// take it (see [`sdpa_kernel`]). The operands passed the op's checks.
pub(super) fn flash_refusal(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &SdpaOptions,
) -> Option<String> {
    if opts.dropout_p > 0.0 {
        return Some(format!(
            "flash attention does not support dropout (dropout_p = {})",
            opts.dropout_p
        ));
    }
    let dims = (q.dim(), k.dim(), v.dim());
    if !matches!(dims, (4, 4, 4) | (3, 3, 3)) {
        return Some(format!(
            "flash attention needs query, key and value all 4-d (or all 3-d), got {}-d, {}-d \
             and {}-d",
            dims.0, dims.1, dims.2
        ));
    }
    // 3-d inputs are one batch entry of heads.
    let lead = if q.dim() == 3 { 1 } else { 0 };
    let size = |t: &Tensor, d: usize| t.shape()[d - lead];
    let (b, hq, hk, hv) = (
        if lead == 1 { 1 } else { q.shape()[0] },
        size(q, 1),
        size(k, 1),
        size(v, 1),
    );
    if lead == 0 && (k.shape()[0] != b || v.shape()[0] != b) {
        return Some(format!(
            "flash attention needs equal batch sizes, got query {b}, key {} and value {}",
            k.shape()[0],
            v.shape()[0]
        ));
    }
    if [q, k, v].iter().any(|t| t.numel() == 0) {
        return Some("flash attention does not run on empty inputs".to_owned());
    }
    let heads_fit = hk == hv && (hq == hk || hk == 1 || (opts.enable_gqa && hq % hk == 0));
    if !heads_fit {
        return Some(format!(
            "flash attention needs key and value with the query's heads, one head, or (with \
             enable_gqa) a divisor of them; got query {hq}, key {hk} and value {hv}"
        ));
    }
    if let Some(mask) = opts.attn_mask {
        if let Some(why) = mask_refusal(mask, lead, [b, hq, size(q, 2), size(k, 2)]) {
            return Some(why);
        }
    }
    let e = |t: &Tensor| t.shape()[t.dim() - 1];
    if e(q) != e(k) || e(q) != e(v) {
        return Some(format!(
            "flash attention needs the same last dimension in query, key and value, got {}, \
             {} and {}",
            e(q),
            e(k),
            e(v)
        ));
    }
    if size(k, 2) != size(v, 2) {
        return Some(format!(
            "flash attention needs as many values as keys, got {} keys and {} values",
            size(k, 2),
            size(v, 2)
        ));
    }
    if [q, k, v].iter().any(|t| t.stride().last() != Some(&1)) {
        return Some(
            "flash attention needs query, key and value with a contiguous last dimension \
             (stride 1); call .contiguous()"
                .to_owned(),
        );
    }
    if !matches!(
        q.dtype(),
        DType::F32 | DType::F64 | DType::BF16 | DType::F16
    ) {
        return Some(format!("flash attention does not support {}", q.dtype()));
    }
    match for_device(q.device()) {
        Ok(backend) if backend.fused_attention() => None,
        _ => Some(format!("{} has no fused attention kernel", q.device())),
    }
}

/// Why a mask keeps an attention of `[B, heads, L, S]` off the fused path, if it does.
fn mask_refusal(mask: &Tensor, lead: usize, [b, h, l, s]: [usize; 4]) -> Option<String> {
    if mask.requires_grad() {
        return Some("flash attention takes no mask that requires grad".to_owned());
    }
    let shape = mask.shape();
    let fits = |n: usize, want: usize| n == want || n == 1;
    let ok = match shape.len() + lead {
        2 if lead == 0 => fits(shape[0], l) && fits(shape[1], s),
        4 => {
            let m: Vec<usize> = std::iter::repeat_n(1, lead)
                .chain(shape.iter().copied())
                .collect();
            fits(m[0], b) && fits(m[1], h) && fits(m[2], l) && fits(m[3], s)
        }
        3 if lead == 1 => fits(shape[0], l) && fits(shape[1], s),
        _ => false,
    };
    if ok {
        return None;
    }
    Some(format!(
        "flash attention takes a 2-d [L|1, S|1] or 4-d [B|1, heads|1, L|1, S|1] mask, got \
         {:?}",
        shape.as_slice()
    ))
}
