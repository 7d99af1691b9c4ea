//! Backward of the three-operand element-wise ops: `where` and `addcmul`.

use super::{record, take, zero, Grads};
use crate::op::OpContext;
use crate::{Result, Scalar, Tensor};

/// Records `out = where(cond, a, b)`.
pub(crate) fn where_cond(
    ctx: &OpContext,
    cond: &Tensor,
    a: &Tensor,
    b: &Tensor,
    out: &Tensor,
) -> Result<()> {
    record(ctx, "WhereBackward0", &[a, b], out, |rec| {
        let c = rec.save(cond)?;
        Ok(move |g: Tensor| -> Grads {
            let c = c.get()?;
            let z = zero(&g)?;
            Ok(vec![
                Some(Tensor::where_cond(&c, &g, &z)?),
                Some(Tensor::where_cond(&c, &z, &g)?),
            ])
        })
    })
}

/// Records `out = x + value * t1 * t2`.
pub(crate) fn addcmul(
    ctx: &OpContext,
    x: &Tensor,
    t1: &Tensor,
    t2: &Tensor,
    value: Scalar,
    out: &Tensor,
) -> Result<()> {
    record(ctx, "AddcmulBackward0", &[x, t1, t2], out, |rec| {
        let (n1, n2) = (rec.needs(1), rec.needs(2));
        let s2 = rec.save_if(n1, t2)?;
        let s1 = rec.save_if(n2, t1)?;
        Ok(move |g: Tensor| -> Grads {
            Ok(vec![
                Some(g.clone()),
                if n1 {
                    Some(g.mul(&take(&s2)?)?.mul(value)?)
                } else {
                    None
                },
                if n2 {
                    Some(g.mul(&take(&s1)?)?.mul(value)?)
                } else {
                    None
                },
            ])
        })
    })
}
