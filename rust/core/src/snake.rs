//! SnakeBeta, the periodic activation of BigVGAN-style vocoders (the Qwen3-TTS 12 Hz speech
//! decoder has one before every convolution of its upsampler):
//! `y = x + inv_beta · sin²(alpha · x)`, per channel.
//!
//! Written as ONNX operators it is five passes over the tensor (Mul, Sin, Mul, Mul, Add), and
//! onnxruntime's Sin runs on one thread; it was a third of the speech decoder's time on a
//! 2-core CPU. Here it is one pass whose sine the compiler vectorises: Cody–Waite reduction by
//! π/2 and the classic single-precision minimax polynomials for sin and cos on [−π/4, π/4]
//! (Moshier's Cephes `sinf`/`cosf` coefficients). Only the square is needed, so the quadrant's
//! sign drops out: sin²(kπ/2 + r) is sin²(r) for even k and cos²(r) for odd k. Rows whose
//! arguments leave the range where the three-part reduction is exact fall back to `f32::sin`.

use crate::error::{ensure, Result};

/// |alpha · x| up to which the reduction is exact (k · P1 needs no more than 24 bits).
const REDUCE_LIMIT: f32 = 8192.0;
const FRAC_2_PI: f32 = std::f32::consts::FRAC_2_PI;
/// 1.5 · 2²³: adding and subtracting it rounds a float below 2²² to the nearest integer.
const ROUND: f32 = 12_582_912.0;
// π/2 split into three parts whose products with k are exact (Cephes' DP1..DP3, doubled).
const P1: f32 = 1.570_312_5;
const P2: f32 = 4.837_513e-4;
const P3: f32 = 7.549_79e-8;
// sin r ≈ r + r·z·(S1 + z·(S2 + z·S3)), cos r ≈ 1 − z/2 + z²·(C1 + z·(C2 + z·C3)), z = r².
const S1: f32 = -1.666_665_5e-1;
const S2: f32 = 8.332_161e-3;
const S3: f32 = -1.951_529_6e-4;
const C1: f32 = 4.166_664_6e-2;
const C2: f32 = -1.388_731_6e-3;
const C3: f32 = 2.443_315_7e-5;

#[inline(always)]
fn sin_squared(y: f32) -> f32 {
    sin_squared_q::<true>(y)
}

/// `QUADRANT = false` is the tests' broken variant: cos² is never chosen for odd k.
#[inline(always)]
fn sin_squared_q<const QUADRANT: bool>(y: f32) -> f32 {
    let k = (y * FRAC_2_PI + ROUND) - ROUND;
    let r = ((y - k * P1) - k * P2) - k * P3;
    let z = r * r;
    let s = r + r * z * (S1 + z * (S2 + z * S3));
    let c = 1.0 - 0.5 * z + z * z * (C1 + z * (C2 + z * C3));
    let v = if !QUADRANT || (k as i32) & 1 == 0 {
        s
    } else {
        c
    };
    v * v
}

#[inline(always)]
fn row_body(x: &[f32], alpha: f32, inv_beta: f32, out: &mut [f32]) -> bool {
    // an integer AND-reduction, which vectorises (a float max would keep the loop scalar);
    // NaN compares false, so it takes the fallback too
    let mut in_range = 1u8;
    for (o, &v) in out.iter_mut().zip(x) {
        let y = alpha * v;
        in_range &= (y.abs() <= REDUCE_LIMIT) as u8;
        *o = v + inv_beta * sin_squared(y);
    }
    in_range == 1
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2(x: &[f32], alpha: f32, inv_beta: f32, out: &mut [f32]) -> bool {
    row_body(x, alpha, inv_beta, out)
}

fn row_fast(x: &[f32], alpha: f32, inv_beta: f32, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function was compiled for.
        return unsafe { row_avx2(x, alpha, inv_beta, out) };
    }
    row_body(x, alpha, inv_beta, out)
}

/// One channel's row: `out[i] = x[i] + inv_beta · sin²(alpha · x[i])`. NaN in, NaN out.
pub fn snake_beta_row(x: &[f32], alpha: f32, inv_beta: f32, out: &mut [f32]) -> Result<()> {
    ensure(out.len() == x.len(), "out", || {
        format!(
            "expected {} values (the row's length), got {}",
            x.len(),
            out.len()
        )
    })?;
    if !row_fast(x, alpha, inv_beta, out) {
        // arguments beyond the exact reduction (or NaN): the library sine, element by element
        for (o, &v) in out.iter_mut().zip(x) {
            let s = (alpha * v).sin();
            *o = v + inv_beta * s * s;
        }
    }
    Ok(())
}

/// SnakeBeta over a `[rows, len]` block whose row `r` belongs to channel `r % channels`
/// (a `[batch, channels, len]` tensor), with per-channel `alpha` and `inv_beta`.
pub fn snake_beta(
    x: &[f32],
    alpha: &[f32],
    inv_beta: &[f32],
    len: usize,
    out: &mut [f32],
) -> Result<()> {
    let channels = alpha.len();
    ensure(channels > 0, "alpha", || {
        "expected one value per channel, got none".into()
    })?;
    ensure(inv_beta.len() == channels, "inv_beta", || {
        format!(
            "expected {channels} values (one per channel, as alpha), got {}",
            inv_beta.len()
        )
    })?;
    ensure(
        len > 0 && x.len().checked_rem(channels * len) == Some(0),
        "x",
        || {
            format!(
                "expected a multiple of channels x len = {channels} x {len}, got {}",
                x.len()
            )
        },
    )?;
    ensure(out.len() == x.len(), "out", || {
        format!("expected {} values, got {}", x.len(), out.len())
    })?;
    for (r, (xr, or)) in x
        .chunks_exact(len)
        .zip(out.chunks_exact_mut(len))
        .enumerate()
    {
        snake_beta_row(xr, alpha[r % channels], inv_beta[r % channels], or)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(x: f32, a: f32, ib: f32) -> f64 {
        let s = (a as f64 * x as f64).sin();
        x as f64 + ib as f64 * s * s
    }

    /// What float32 allows: the sum's rounding at |x| and the argument's at |a·x|.
    fn tolerance(x: f32, a: f32, ib: f32) -> f64 {
        1.2e-7 * (x.abs() as f64 + 2.0 * (a * x).abs() as f64 * ib.abs() as f64) + 1e-7
    }

    /// Largest |f(y) − sin²(y)| (double precision) over `n` points of [−limit, limit].
    fn worst_error(f: impl Fn(f32) -> f32, limit: f32, n: usize) -> f64 {
        (0..=n)
            .map(|i| -limit + 2.0 * limit * (i as f32 / n as f32))
            .map(|y| (f(y) as f64 - (y as f64).sin().powi(2)).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn sin_squared_matches_double_precision_over_the_reduction_range() {
        // near zero the kernel is as good as float32 gets
        assert!(worst_error(sin_squared, 8.0, 200_000) < 3e-7);
        // far out, the float32 argument itself is only known to |y|·2⁻²⁴ (≈ 5e-4 at 8192):
        // the kernel adds nothing above that
        assert!(worst_error(sin_squared, REDUCE_LIMIT, 2_000_000) < 1e-3);
        // the broken variant (the quadrant ignored) must fail the same check
        assert!(worst_error(sin_squared_q::<false>, 8.0, 200_000) > 0.5);
    }

    #[test]
    fn rows_match_the_formula_and_fall_back_beyond_the_range() {
        let x: Vec<f32> = (0..1001).map(|i| (i as f32 - 500.0) * 0.037).collect();
        let mut out = vec![0.0; x.len()];
        snake_beta_row(&x, 2.5, 0.7, &mut out).unwrap();
        for (&v, &o) in x.iter().zip(&out) {
            let err = (o as f64 - reference(v, 2.5, 0.7)).abs();
            assert!(err < tolerance(v, 2.5, 0.7), "{v}: {o} off by {err}");
        }
        let big = [1.0e6f32, -3.0e5, 7.0];
        let mut out = [0.0f32; 3];
        snake_beta_row(&big, 1.0, 1.0, &mut out).unwrap();
        for (&v, &o) in big.iter().zip(&out) {
            let s = v.sin();
            assert_eq!(o, v + s * s);
        }
        let mut out = [0.0f32; 1];
        snake_beta_row(&[f32::NAN], 1.0, 1.0, &mut out).unwrap();
        assert!(out[0].is_nan());
    }

    #[test]
    fn channels_take_their_own_parameters() {
        let (channels, len) = (3, 5);
        let x: Vec<f32> = (0..2 * channels * len)
            .map(|i| i as f32 * 0.1 - 1.0)
            .collect();
        let alpha = [0.5, 1.0, 2.0];
        let inv_beta = [1.0, 0.25, 3.0];
        let mut out = vec![0.0; x.len()];
        snake_beta(&x, &alpha, &inv_beta, len, &mut out).unwrap();
        for (i, (&v, &o)) in x.iter().zip(&out).enumerate() {
            let c = (i / len) % channels;
            let err = (o as f64 - reference(v, alpha[c], inv_beta[c])).abs();
            assert!(
                err < tolerance(v, alpha[c], inv_beta[c]),
                "{i}: off by {err}"
            );
        }
    }

    #[test]
    fn bad_shapes_name_the_argument() {
        let mut out = vec![0.0; 6];
        let e = snake_beta(&[0.0; 6], &[1.0, 1.0], &[1.0], 3, &mut out).unwrap_err();
        assert!(e.to_string().contains("inv_beta"));
        let e = snake_beta(&[0.0; 5], &[1.0, 1.0], &[1.0, 1.0], 3, &mut out).unwrap_err();
        assert!(e.to_string().contains('x'));
        let e = snake_beta(&[0.0; 6], &[1.0, 1.0], &[1.0, 1.0], 3, &mut out[..4]).unwrap_err();
        assert!(e.to_string().contains("out"));
    }
}
