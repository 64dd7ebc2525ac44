//! Frozen LM heads evaluated on the host, one row at a time.
//!
//! A verify walk reads the target rows of at most depth+1 nodes, and the next round needs
//! draft rows of one node only. Computing just those rows here costs (2K+1) GEMVs per round,
//! whereas an ONNX graph that selects a head per query node must copy Q·V·H weights per call
//! (onnxruntime has no weight views), which on a CPU costs more than the transformer layers.

use rayon::prelude::*;

use crate::error::{ensure, Error, Result};
use crate::warp::{top_k_tokens, Scratch};

/// `num_heads` linear heads without bias, weights [num_heads, vocab, hidden] row-major.
#[derive(Clone, Debug)]
pub struct HeadBank {
    /// f32 target weights, or None when every weight is exactly a bf16 value: then the bf16
    /// array below serves the targets too, bit-identical results from half the bytes.
    weights: Option<Vec<f32>>,
    /// bf16 copy for the draft rows: drafts need not be exact (verification never sees them),
    /// and half the bytes halve both their cost and how much of the graph's weights they
    /// evict from cache between calls.
    drafts_bf16: Vec<u16>,
    num_heads: usize,
    vocab: usize,
    hidden: usize,
}

/// Rows this long are split across threads; below it a single core is faster.
const PAR_MIN_MACS: usize = 1 << 21;

impl HeadBank {
    pub fn new(weights: Vec<f32>, num_heads: usize, vocab: usize, hidden: usize) -> Result<Self> {
        ensure(num_heads > 0 && vocab > 0 && hidden > 0, "weights", || {
            format!(
                "expected a non-empty [heads, V, H] array, got [{num_heads}, {vocab}, {hidden}]"
            )
        })?;
        ensure(
            weights.len() == num_heads * vocab * hidden,
            "weights",
            || {
                format!(
                    "expected {} values, got {}",
                    num_heads * vocab * hidden,
                    weights.len()
                )
            },
        )?;
        ensure(weights.iter().all(|w| w.is_finite()), "weights", || {
            "contains NaN or inf".into()
        })?;
        let drafts_bf16: Vec<u16> = weights.iter().map(|&w| to_bf16(w)).collect();
        let exact = weights
            .iter()
            .zip(&drafts_bf16)
            .all(|(&w, &b)| b.widen().to_bits() == w.to_bits());
        Ok(Self {
            weights: if exact { None } else { Some(weights) },
            drafts_bf16,
            num_heads,
            vocab,
            hidden,
        })
    }

    pub fn num_heads(&self) -> usize {
        self.num_heads
    }
    pub fn vocab(&self) -> usize {
        self.vocab
    }
    pub fn hidden(&self) -> usize {
        self.hidden
    }
    /// Whether the targets are read from the bf16 array (all weights exactly bf16).
    pub fn targets_bf16(&self) -> bool {
        self.weights.is_none()
    }

    pub fn check_head(&self, head: i64, arg: &'static str) -> Result<usize> {
        ensure(head >= 0 && (head as usize) < self.num_heads, arg, || {
            format!("head {head} outside [0, {})", self.num_heads)
        })?;
        Ok(head as usize)
    }

    /// out[v] = W[head, v, :] · (z + offset).
    pub fn logits_into(&self, head: usize, z: &[f32], offset: Option<&[f32]>, out: &mut [f32]) {
        let h = self.hidden;
        let mut x = z.to_vec();
        if let Some(b) = offset {
            x.iter_mut().zip(b).for_each(|(a, b)| *a += b);
        }
        let range = head * self.vocab * h..(head + 1) * self.vocab * h;
        match &self.weights {
            Some(w) => self.rows(&w[range], &x, out),
            None => self.rows(&self.drafts_bf16[range], &x, out),
        }
    }

    /// out [n, V] = W[head] · zs[r] for the n rows of zs [n, H]: `logits_into` for many rows
    /// at once, the same floats.
    pub fn logits_rows_into(&self, head: usize, zs: &[f32], n: usize, out: &mut [f32]) {
        let h = self.hidden;
        let range = head * self.vocab * h..(head + 1) * self.vocab * h;
        match &self.weights {
            Some(w) => gemm_rows(&w[range], zs, n, out),
            None => gemm_rows(&self.drafts_bf16[range], zs, n, out),
        }
    }

    fn rows<W: Weight + Sync>(&self, w: &[W], x: &[f32], out: &mut [f32]) {
        let h = self.hidden;
        if self.vocab * h >= PAR_MIN_MACS {
            out.par_chunks_mut(256)
                .zip(w.par_chunks(256 * h))
                .for_each(|(o, wc)| gemv(wc, x, o));
        } else {
            gemv(w, x, out);
        }
    }

    /// Draft logits W_bf16[head] · (z + offset): bf16 weights, f32 arithmetic.
    pub fn draft_logits_into(&self, head: usize, z: &[f32], offset: &[f32], out: &mut [f32]) {
        let h = self.hidden;
        let x: Vec<f32> = z.iter().zip(offset).map(|(a, b)| a + b).collect();
        let w = &self.drafts_bf16[head * self.vocab * h..(head + 1) * self.vocab * h];
        gemv(w, &x, out);
    }

    /// Top-`m` candidate tokens per draft depth: row j uses head min(first_head + j, last)
    /// on z + offsets[j]. out [K, m].
    pub fn draft_candidates(
        &self,
        z: &[f32],
        first_head: usize,
        offsets: &[f32],
        k: usize,
        m: usize,
        out: &mut [i32],
    ) -> Result<()> {
        ensure(z.len() == self.hidden, "z", || {
            format!("expected {} values, got {}", self.hidden, z.len())
        })?;
        ensure(offsets.len() == k * self.hidden, "offsets", || {
            format!(
                "expected shape [{k}, {}], got {} values",
                self.hidden,
                offsets.len()
            )
        })?;
        ensure(m >= 1 && m <= self.vocab, "m", || {
            format!("must be in [1, {}], got {m}", self.vocab)
        })?;
        let mut row = vec![0.0f32; self.vocab];
        let mut scratch = Scratch::default();
        for j in 0..k {
            let head = (first_head + j).min(self.num_heads - 1);
            let b = &offsets[j * self.hidden..(j + 1) * self.hidden];
            self.draft_logits_into(head, z, b, &mut row);
            if row.iter().any(|v| !v.is_finite()) {
                return Err(Error::new("z", "draft logits are not finite"));
            }
            top_k_tokens(&row, m, &mut scratch, &mut out[j * m..(j + 1) * m]);
        }
        Ok(())
    }
}

/// Round to nearest even; NaN cannot occur (weights are validated finite).
fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// A stored weight: f32 as is, or bf16 bits widened by a shift (exact, and vectorisable).
trait Weight: Copy {
    fn widen(self) -> f32;
}

impl Weight for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Weight for u16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits((self as u32) << 16)
    }
}

/// out[r] = w[r, :] · x.
fn gemv<W: Weight>(w: &[W], x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // Safety: both features were detected just above.
            return unsafe { gemv_avx2(w, x, out) };
        }
    }
    gemv_body::<W, false>(w, x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_avx2<W: Weight>(w: &[W], x: &[f32], out: &mut [f32]) {
    // The same loop compiled for 8-wide FMA: a head row is read once per round, so the GEMV
    // is the host's largest cost per speculative round.
    gemv_body::<W, true>(w, x, out)
}

/// Sixteen independent accumulators so the loop vectorises and hides FMA latency. `FMA` only
/// where the CPU has it: elsewhere `mul_add` would be a slow library call.
#[inline(always)]
fn gemv_body<W: Weight, const FMA: bool>(w: &[W], x: &[f32], out: &mut [f32]) {
    let h = x.len();
    for (o, row) in out.iter_mut().zip(w.chunks_exact(h)) {
        *o = dot_body::<W, FMA>(row, x);
    }
}

/// One weight row · x, the arithmetic every logit of this module uses (so that a logit is
/// the same float however many rows are computed together).
#[inline(always)]
fn dot_body<W: Weight, const FMA: bool>(row: &[W], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let (a, b) = (row.chunks_exact(16), x.chunks_exact(16));
    let (ra, rb) = (a.remainder(), b.remainder());
    for (ca, cb) in a.zip(b) {
        for i in 0..16 {
            let wi = ca[i].widen();
            acc[i] = if FMA {
                wi.mul_add(cb[i], acc[i])
            } else {
                acc[i] + wi * cb[i]
            };
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (p, q) in ra.iter().zip(rb) {
        s += p.widen() * q;
    }
    s
}

/// out[r * V + i] = W[i] · xs[r] for n rows xs [n, H]: each weight row is read once for all
/// n rows (it stays in L1), each logit computed exactly as `gemv` computes it.
fn gemm_rows<W: Weight>(w: &[W], xs: &[f32], n: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // Safety: both features were detected just above.
            return unsafe { gemm_rows_avx2(w, xs, n, out) };
        }
    }
    gemm_rows_body::<W, false>(w, xs, n, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemm_rows_avx2<W: Weight>(w: &[W], xs: &[f32], n: usize, out: &mut [f32]) {
    gemm_rows_body::<W, true>(w, xs, n, out)
}

#[inline(always)]
fn gemm_rows_body<W: Weight, const FMA: bool>(w: &[W], xs: &[f32], n: usize, out: &mut [f32]) {
    let h = xs.len() / n;
    let v = w.len() / h;
    for (i, row) in w.chunks_exact(h).enumerate() {
        for (r, x) in xs.chunks_exact(h).enumerate() {
            out[r * v + i] = dot_body::<W, FMA>(row, x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_rows_give_the_floats_of_one_row_at_a_time() {
        let (n, v, h) = (2, 300, 37);
        let w: Vec<f32> = (0..n * v * h)
            .map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.013)
            .collect();
        let bank = HeadBank::new(w, n, v, h).unwrap();
        let rows = 5;
        let zs: Vec<f32> = (0..rows * h)
            .map(|i| (i % 23) as f32 * 0.07 - 0.5)
            .collect();
        let mut many = vec![0.0; rows * v];
        bank.logits_rows_into(1, &zs, rows, &mut many);
        for r in 0..rows {
            let mut one = vec![0.0; v];
            bank.logits_into(1, &zs[r * h..(r + 1) * h], None, &mut one);
            assert_eq!(&many[r * v..(r + 1) * v], &one[..]);
        }
    }

    #[test]
    fn gemv_matches_naive_and_candidates_are_sorted() {
        let (n, v, h) = (2, 37, 19);
        let w: Vec<f32> = (0..n * v * h)
            .map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.1)
            .collect();
        let bank = HeadBank::new(w.clone(), n, v, h).unwrap();
        let z: Vec<f32> = (0..h).map(|i| i as f32 * 0.05 - 0.3).collect();
        let mut out = vec![0.0; v];
        bank.logits_into(1, &z, None, &mut out);
        for r in 0..v {
            let want: f32 = (0..h).map(|c| w[(v + r) * h + c] * z[c]).sum();
            assert!((out[r] - want).abs() < 1e-4);
        }
        let offs = vec![0.0; 3 * h];
        let mut cand = vec![0; 3 * 4];
        bank.draft_candidates(&z, 0, &offs, 3, 4, &mut cand)
            .unwrap();
        assert_eq!(
            out[cand[4] as usize],
            out.iter().cloned().fold(f32::MIN, f32::max)
        );
        assert!(!bank.targets_bf16());
    }

    #[test]
    fn bf16_exact_weights_share_one_array_and_give_identical_rows() {
        let (n, v, h) = (3, 41, 35);
        let w: Vec<f32> = (0..n * v * h)
            .map(|i| ((i * 7919 % 257) as f32 - 128.0) / 64.0) // at most 8 significant bits
            .collect();
        let bank = HeadBank::new(w.clone(), n, v, h).unwrap();
        assert!(bank.targets_bf16());
        let mut f32_bank = bank.clone();
        f32_bank.weights = Some(w);
        let z: Vec<f32> = (0..h).map(|i| (i as f32 * 0.37).sin()).collect();
        let (mut a, mut b) = (vec![0.0; v], vec![0.0; v]);
        for head in 0..n {
            bank.logits_into(head, &z, None, &mut a);
            f32_bank.logits_into(head, &z, None, &mut b);
            assert_eq!(a, b);
        }
    }
}
