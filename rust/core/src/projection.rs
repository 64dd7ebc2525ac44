//! Dense linear maps y = x · W (+ b) for the vocoders, on the calling thread.
//!
//! The codecs' decoders multiply a chunk's rows by fixed tables between frames (PCA basis,
//! mel pseudo-inverse). numpy sends those products to OpenBLAS, whose workers then spin for
//! about 0.1 s and take a 2-core machine's CPU from the graph calls that follow, and whose
//! thread count is process-global (setting it per call raced between server threads). Here
//! the product runs on the caller's thread only: no pool, nothing left spinning, nothing
//! global.
//!
//! Every output is `(Σ_k x[k] · W[k, j]) + b[j]`, the sum taken in k order from 0 with a
//! separate multiply and add (no fused multiply-add), whatever the tiling or SIMD width: the
//! same input gives the same bits on every thread, call and x86/ARM machine.

use crate::error::{ensure, Result};

/// A float the maps run in (f32 or f64): the arithmetic and the tile each one uses.
pub trait Real:
    Copy
    + Default
    + PartialEq
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + Send
    + Sync
    + 'static
{
    fn finite(self) -> bool;
    /// out [n, M] = x [n, K] · w [K, M] (+ bias), the arithmetic of the module doc.
    fn project(x: &[Self], w: &[Self], bias: Option<&[Self]>, m: usize, out: &mut [Self]);
}

impl Real for f32 {
    fn finite(self) -> bool {
        self.is_finite()
    }
    fn project(x: &[f32], w: &[f32], bias: Option<&[f32]>, m: usize, out: &mut [f32]) {
        // 16 columns x 4 rows: 8 accumulator registers at AVX2's 8 lanes
        dispatch::<f32, 16>(x, w, bias, m, out)
    }
}

impl Real for f64 {
    fn finite(self) -> bool {
        self.is_finite()
    }
    fn project(x: &[f64], w: &[f64], bias: Option<&[f64]>, m: usize, out: &mut [f64]) {
        // 8 columns x 4 rows: the same 8 registers at 4 lanes
        dispatch::<f64, 8>(x, w, bias, m, out)
    }
}

/// y = x · W (+ b): weights [K, M] row-major (K inputs, M outputs), bias [M] or none.
#[derive(Clone, Debug)]
pub struct Projection<T: Real> {
    weights: Vec<T>,
    bias: Option<Vec<T>>,
    inputs: usize,
    outputs: usize,
}

impl<T: Real> Projection<T> {
    pub fn new(
        weights: Vec<T>,
        inputs: usize,
        outputs: usize,
        bias: Option<Vec<T>>,
    ) -> Result<Self> {
        ensure(inputs > 0 && outputs > 0, "weights", || {
            format!("expected a non-empty [K, M] array, got [{inputs}, {outputs}]")
        })?;
        ensure(weights.len() == inputs * outputs, "weights", || {
            format!(
                "expected {} values, got {}",
                inputs * outputs,
                weights.len()
            )
        })?;
        ensure(weights.iter().all(|w| w.finite()), "weights", || {
            "contains NaN or inf".into()
        })?;
        if let Some(b) = &bias {
            ensure(b.len() == outputs, "bias", || {
                format!("expected {outputs} values, got {}", b.len())
            })?;
            ensure(b.iter().all(|v| v.finite()), "bias", || {
                "contains NaN or inf".into()
            })?;
        }
        Ok(Self {
            weights,
            bias,
            inputs,
            outputs,
        })
    }

    pub fn inputs(&self) -> usize {
        self.inputs
    }
    pub fn outputs(&self) -> usize {
        self.outputs
    }
    pub fn weights(&self) -> &[T] {
        &self.weights
    }
    pub fn bias(&self) -> Option<&[T]> {
        self.bias.as_deref()
    }

    /// out [n, M] = x [n, K] · W (+ b) for the n = x.len() / K rows of x.
    pub fn apply_into(&self, x: &[T], out: &mut [T]) -> Result<()> {
        let k = self.inputs;
        let n = x.len() / k;
        ensure(n * k == x.len(), "x", || {
            format!("expected rows of {k} values, got {} values", x.len())
        })?;
        ensure(out.len() == n * self.outputs, "out", || {
            format!("expected {} values, got {}", n * self.outputs, out.len())
        })?;
        T::project(x, &self.weights, self.bias.as_deref(), self.outputs, out);
        Ok(())
    }
}

/// The AVX2 build of the kernel where the CPU has it (wider registers, the same arithmetic:
/// no FMA, so the bits do not depend on which build ran).
fn dispatch<T: Real, const C: usize>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    m: usize,
    out: &mut [T],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // Safety: the feature was detected just above.
            return unsafe { project_avx2::<T, C>(x, w, bias, m, out) };
        }
    }
    project_body::<T, C>(x, w, bias, m, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn project_avx2<T: Real, const C: usize>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    m: usize,
    out: &mut [T],
) {
    project_body::<T, C>(x, w, bias, m, out)
}

/// Rows of x in blocks of 4, columns in blocks of C: a 4 x C tile of accumulators stays in
/// registers over the whole k loop, each weight row slice read once per 4 rows.
#[inline(always)]
fn project_body<T: Real, const C: usize>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    m: usize,
    out: &mut [T],
) {
    let k = w.len() / m;
    let n = x.len() / k;
    let full = m - m % C;
    let mut r = 0;
    while r + 4 <= n {
        let xs = &x[r * k..(r + 4) * k];
        let mut j = 0;
        while j < full {
            tile::<T, C>(xs, w, k, m, j, bias, &mut out[r * m..(r + 4) * m]);
            j += C;
        }
        for rr in r..r + 4 {
            edge(
                &x[rr * k..(rr + 1) * k],
                w,
                m,
                full,
                bias,
                &mut out[rr * m..(rr + 1) * m],
            );
        }
        r += 4;
    }
    for rr in r..n {
        edge(
            &x[rr * k..(rr + 1) * k],
            w,
            m,
            0,
            bias,
            &mut out[rr * m..(rr + 1) * m],
        );
    }
}

/// Columns j0 .. j0 + C of 4 rows (xs [4, K], out [4, M]).
#[inline(always)]
fn tile<T: Real, const C: usize>(
    xs: &[T],
    w: &[T],
    k: usize,
    m: usize,
    j0: usize,
    bias: Option<&[T]>,
    out: &mut [T],
) {
    let mut acc = [[T::default(); C]; 4];
    for kk in 0..k {
        let wr: &[T; C] = w[kk * m + j0..kk * m + j0 + C]
            .try_into()
            .expect("C columns");
        for (row, a) in acc.iter_mut().enumerate() {
            let xv = xs[row * k + kk];
            for c in 0..C {
                a[c] = a[c] + xv * wr[c];
            }
        }
    }
    for (row, a) in acc.iter().enumerate() {
        let o = &mut out[row * m + j0..row * m + j0 + C];
        for c in 0..C {
            o[c] = match bias {
                Some(b) => a[c] + b[j0 + c],
                None => a[c],
            };
        }
    }
}

/// Columns j0 .. M of one row, one output at a time: the tile's arithmetic for the columns
/// and rows no full tile covers.
fn edge<T: Real>(x: &[T], w: &[T], m: usize, j0: usize, bias: Option<&[T]>, out: &mut [T]) {
    for j in j0..m {
        let mut a = T::default();
        for (kk, &xv) in x.iter().enumerate() {
            a = a + xv * w[kk * m + j];
        }
        out[j] = match bias {
            Some(b) => a + b[j],
            None => a,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain triple loop in the module doc's order.
    fn naive<T: Real>(x: &[T], w: &[T], bias: Option<&[T]>, k: usize, m: usize) -> Vec<T> {
        let n = x.len() / k;
        let mut out = vec![T::default(); n * m];
        for r in 0..n {
            for j in 0..m {
                let mut a = T::default();
                for kk in 0..k {
                    a = a + x[r * k + kk] * w[kk * m + j];
                }
                out[r * m + j] = bias.map_or(a, |b| a + b[j]);
            }
        }
        out
    }

    fn values(len: usize, salt: usize) -> Vec<f64> {
        (0..len)
            .map(|i| (((i * 7919 + salt * 104729) % 1013) as f64 - 506.0) / 97.0)
            .map(|v| v.sin() * 3.0 + v * 1e-3)
            .collect()
    }

    #[test]
    fn tiles_and_edges_give_the_bits_of_the_plain_loop() {
        // rows and columns that are not whole tiles, with and without a bias
        for &(n, k, m) in &[
            (1, 3, 5),
            (4, 80, 513),
            (11, 128, 640),
            (7, 17, 23),
            (0, 4, 9),
        ] {
            let x = values(n * k, 1);
            let w = values(k * m, 2);
            let b = values(m, 3);
            for bias in [None, Some(b.clone())] {
                let p = Projection::new(w.clone(), k, m, bias.clone()).unwrap();
                let mut out = vec![0.0; n * m];
                p.apply_into(&x, &mut out).unwrap();
                let want = naive(&x, &w, bias.as_deref(), k, m);
                assert!(out
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
                let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                let w32: Vec<f32> = w.iter().map(|&v| v as f32).collect();
                let b32: Option<Vec<f32>> =
                    bias.as_ref().map(|b| b.iter().map(|&v| v as f32).collect());
                let p32 = Projection::new(w32.clone(), k, m, b32.clone()).unwrap();
                let mut o32 = vec![0.0f32; n * m];
                p32.apply_into(&x32, &mut o32).unwrap();
                let want32 = naive(&x32, &w32, b32.as_deref(), k, m);
                assert!(o32
                    .iter()
                    .zip(&want32)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }

    #[test]
    fn the_portable_build_gives_the_bits_of_the_avx2_build() {
        let (n, k, m) = (9, 80, 513);
        let (x, w) = (values(n * k, 4), values(k * m, 5));
        let mut a = vec![0.0; n * m];
        let mut b = vec![0.0; n * m];
        dispatch::<f64, 8>(&x, &w, None, m, &mut a);
        project_body::<f64, 8>(&x, &w, None, m, &mut b);
        assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()));
    }

    #[test]
    fn shapes_and_values_are_checked() {
        assert!(Projection::new(vec![1.0f32; 6], 2, 3, None).is_ok());
        assert!(Projection::new(vec![1.0f32; 5], 2, 3, None).is_err());
        assert!(Projection::new(vec![1.0f32; 0], 0, 3, None).is_err());
        assert!(Projection::new(vec![1.0f32; 6], 2, 3, Some(vec![0.0; 2])).is_err());
        assert!(Projection::new(vec![f32::NAN; 6], 2, 3, None).is_err());
        let p = Projection::new(vec![1.0f64; 6], 2, 3, None).unwrap();
        assert!(p.apply_into(&[1.0; 3], &mut [0.0; 3]).is_err());
        assert!(p.apply_into(&[1.0; 4], &mut [0.0; 3]).is_err());
        let mut out = [0.0; 6];
        p.apply_into(&[1.0, 2.0, 3.0, 4.0], &mut out).unwrap();
        assert_eq!(out, [3.0, 3.0, 3.0, 7.0, 7.0, 7.0]);
    }
}
