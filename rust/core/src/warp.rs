//! Logits → warped categorical distribution: temperature, then top-k, then top-p.
//!
//! The result is kept sparse (ascending token ids with f64 masses) because a verifier only ever
//! needs p(x) for a handful of drafted tokens, a residual over p's support, and one sample.
//! With top-k on, only k exponentials are computed per row.

use std::cmp::Ordering;

use crate::error::{ensure, Error, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy (argmax, lowest index on ties).
    pub temperature: f32,
    /// 0 = off; k >= V is also off.
    pub top_k: usize,
    /// 1 = off; otherwise in (0, 1].
    pub top_p: f32,
    /// 1 = off; otherwise > 0, applied before temperature to the ids in a stream's history
    /// (`apply_repetition_penalty`).
    pub repetition_penalty: f32,
}

impl SamplingParams {
    pub fn new(temperature: f32, top_k: i64, top_p: f32) -> Result<Self> {
        ensure(
            temperature.is_finite() && temperature >= 0.0,
            "temperature",
            || format!("must be finite and >= 0 (0 = greedy), got {temperature}"),
        )?;
        ensure(top_k >= 0, "top_k", || {
            format!("must be >= 0 (0 = off), got {top_k}")
        })?;
        ensure(top_p > 0.0 && top_p <= 1.0, "top_p", || {
            format!("must be in (0, 1], got {top_p}")
        })?;
        Ok(Self {
            temperature,
            top_k: top_k as usize,
            top_p,
            repetition_penalty: 1.0,
        })
    }

    /// The same parameters with repetition penalty `r` (> 0 and finite; 1 = off).
    pub fn with_repetition_penalty(mut self, r: f32) -> Result<Self> {
        ensure(r.is_finite() && r > 0.0, "repetition_penalty", || {
            format!("must be finite and > 0 (1 = off), got {r}")
        })?;
        self.repetition_penalty = r;
        Ok(self)
    }

    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            repetition_penalty: 1.0,
        }
    }

    #[inline]
    pub fn has_penalty(&self) -> bool {
        self.repetition_penalty != 1.0
    }

    #[inline]
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

/// A categorical law over `0..vocab`, stored on its support in ascending token order.
#[derive(Clone, Debug, Default)]
pub struct Dist {
    pub vocab: usize,
    pub tokens: Vec<u32>,
    pub probs: Vec<f64>,
    /// tokens == 0..vocab: lookups index directly.
    pub dense: bool,
}

impl Dist {
    pub fn point(vocab: usize, token: u32) -> Self {
        Self {
            vocab,
            tokens: vec![token],
            probs: vec![1.0],
            dense: false,
        }
    }

    /// Position of `x` in the support, if it is there.
    #[inline]
    pub fn position(&self, x: u32) -> Option<usize> {
        if self.dense {
            ((x as usize) < self.vocab).then_some(x as usize)
        } else {
            self.tokens.binary_search(&x).ok()
        }
    }

    #[inline]
    pub fn prob(&self, x: u32) -> f64 {
        self.position(x).map_or(0.0, |i| self.probs[i])
    }

    /// Inverse-CDF sample with `u` in (0, 1]; `probs` need not be normalised. Always returns a
    /// token of positive mass when one exists.
    pub fn sample(&self, u: f64) -> u32 {
        sample_weights(&self.tokens, &self.probs, u)
    }

    pub fn write_dense(&self, out: &mut [f32]) {
        out.fill(0.0);
        for (&t, &p) in self.tokens.iter().zip(&self.probs) {
            out[t as usize] = p as f32;
        }
    }
}

/// Inverse-CDF over (tokens, weights). Rounding can leave the running sum just below the
/// target; then the last positive-weight token is the answer, never an out-of-range id.
pub fn sample_weights(tokens: &[u32], weights: &[f64], u: f64) -> u32 {
    let total: f64 = weights.iter().sum();
    let target = u * total;
    let mut acc = 0.0;
    let mut last = None;
    for (&t, &w) in tokens.iter().zip(weights) {
        if w > 0.0 {
            acc += w;
            last = Some(t);
            if acc >= target {
                return t;
            }
        }
    }
    last.unwrap_or_else(|| tokens.first().copied().unwrap_or(0))
}

/// Max and "every entry is < +inf and not NaN" for one row, in a form the compiler vectorises.
pub fn row_check(row: &[f32]) -> (f32, bool) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // Safety: the CPU supports AVX2, checked just above.
            return unsafe { row_check_avx2(row) };
        }
    }
    row_check_body(row)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn row_check_avx2(row: &[f32]) -> (f32, bool) {
    // The same body compiled with 8-wide vectors; validation runs over every logit of every
    // call, so it is worth the dispatch.
    row_check_body(row)
}

#[inline(always)]
fn row_check_body(row: &[f32]) -> (f32, bool) {
    // NaN and +inf are the bit patterns whose magnitude is >= +inf's, except -inf itself:
    // integer compares on the bits vectorise where float compares with a bool fold do not.
    const INF: u32 = 0x7f80_0000;
    let mut mx = [f32::NEG_INFINITY; 16];
    let mut bad = [0u32; 16];
    let chunks = row.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            let b = c[i].to_bits();
            bad[i] |= ((b & 0x7fff_ffff) > INF) as u32 | (b == INF) as u32;
            mx[i] = mx[i].max(c[i]);
        }
    }
    let mut m = mx.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut any_bad = bad.iter().any(|&b| b != 0);
    for &v in rest {
        any_bad |= v.is_nan() || v == f32::INFINITY;
        m = m.max(v);
    }
    (m, !any_bad)
}

/// Validates a [rows, vocab] logits block: no NaN, no +inf, a finite entry in every row.
pub fn check_logits(logits: &[f32], vocab: usize, arg: &'static str) -> Result<()> {
    ensure(vocab > 0, arg, || "vocabulary size must be > 0".into())?;
    ensure(logits.len().checked_rem(vocab) == Some(0), arg, || {
        format!("length {} is not a multiple of V = {vocab}", logits.len())
    })?;
    for (r, row) in logits.chunks_exact(vocab).enumerate() {
        let (m, ok) = row_check(row);
        if !ok {
            return Err(Error::new(arg, format!("row {r} contains NaN or +inf")));
        }
        if m == f32::NEG_INFINITY {
            return Err(Error::new(arg, format!("row {r} has no finite entry")));
        }
    }
    Ok(())
}

/// Lowest index of the maximum (ties → lowest index, as top-k breaks them).
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best as u32
}

/// Reusable buffers so a verify call allocates nothing per visited row.
#[derive(Default)]
pub struct Scratch {
    cand: Vec<(f32, u32)>,
    maxima: Vec<f32>,
    order: Vec<usize>,
}

/// `a` ranks before `b`: larger logit, then lower index.
#[inline]
fn ranks_before(a: &(f32, u32), b: &(f32, u32)) -> Ordering {
    b.0.partial_cmp(&a.0)
        .unwrap_or(Ordering::Equal)
        .then(a.1.cmp(&b.1))
}

/// The k best (logit, index) pairs (in no particular order).
///
/// Split the row into `lanes` interleaved groups (token i in group i mod lanes): the k-th
/// largest group maximum is a lower bound on the row's k-th largest value, because k groups
/// each hold an element at least that large. The maxima take one vectorised pass, and the
/// filtering pass leaves only a few dozen candidates for the exact selection.
fn top_k_candidates(row: &[f32], k: usize, cand: &mut Vec<(f32, u32)>, maxima: &mut Vec<f32>) {
    cand.clear();
    let lanes = (2 * k).next_power_of_two().max(64);
    let floor = if row.len() >= 4 * lanes {
        maxima.clear();
        maxima.resize(lanes, f32::NEG_INFINITY);
        for block in row.chunks_exact(lanes) {
            for (m, &v) in maxima.iter_mut().zip(block) {
                *m = m.max(v);
            }
        }
        let (_, kth, _) = maxima
            .select_nth_unstable_by(k - 1, |a, b| b.partial_cmp(a).unwrap_or(Ordering::Equal));
        *kth
    } else {
        f32::NEG_INFINITY
    };
    for (i, &v) in row.iter().enumerate() {
        if v >= floor && v > f32::NEG_INFINITY {
            cand.push((v, i as u32));
        }
    }
    if cand.len() > k {
        cand.select_nth_unstable_by(k - 1, ranks_before);
        cand.truncate(k);
    }
}

/// The k highest-logit tokens of a validated row, best first (ties → lowest index): the
/// deterministic children of a top-k draft tree.
pub fn top_k_tokens(row: &[f32], k: usize, scratch: &mut Scratch, out: &mut [i32]) {
    let k = k.min(row.len());
    if k == 0 {
        return;
    }
    top_k_candidates(row, k, &mut scratch.cand, &mut scratch.maxima);
    scratch.cand.sort_unstable_by(ranks_before);
    for (o, c) in out.iter_mut().zip(&scratch.cand) {
        *o = c.1 as i32;
    }
}

/// Row-wise `top_k_tokens` over a [rows, vocab] block into out [rows, k].
pub fn top_k_rows(logits: &[f32], vocab: usize, k: usize, out: &mut [i32]) -> Result<()> {
    check_logits(logits, vocab, "logits")?;
    ensure(k >= 1 && k <= vocab, "k", || {
        format!("must be in [1, V = {vocab}], got {k}")
    })?;
    let mut scratch = Scratch::default();
    for (row, o) in logits.chunks_exact(vocab).zip(out.chunks_exact_mut(k)) {
        top_k_tokens(row, k, &mut scratch, o);
    }
    Ok(())
}

/// Warps one row of logits into `out`. Rows must already be validated (`check_logits`).
pub fn warp_row(row: &[f32], params: &SamplingParams, scratch: &mut Scratch, out: &mut Dist) {
    let vocab = row.len();
    out.vocab = vocab;
    out.tokens.clear();
    out.probs.clear();
    if params.is_greedy() {
        out.dense = false;
        out.tokens.push(argmax(row));
        out.probs.push(1.0);
        return;
    }
    let inv_t = 1.0 / params.temperature as f64;
    if params.top_k > 0 && params.top_k < vocab {
        top_k_candidates(row, params.top_k, &mut scratch.cand, &mut scratch.maxima);
        scratch.cand.sort_unstable_by_key(|c| c.1);
        let mx = scratch
            .cand
            .iter()
            .map(|c| c.0)
            .fold(f32::NEG_INFINITY, f32::max) as f64;
        out.dense = false;
        for &(v, i) in &scratch.cand {
            let w = ((v as f64 - mx) * inv_t).exp();
            if w > 0.0 {
                out.tokens.push(i);
                out.probs.push(w);
            }
        }
    } else {
        let mx = row_check(row).0 as f64;
        out.dense = true;
        out.tokens.extend(0..vocab as u32);
        out.probs
            .extend(row.iter().map(|&v| ((v as f64 - mx) * inv_t).exp()));
    }
    normalise(&mut out.probs);
    if params.top_p < 1.0 {
        apply_top_p(out, params.top_p as f64, &mut scratch.order);
    }
}

pub fn normalise(p: &mut [f64]) {
    let s: f64 = p.iter().sum();
    if s > 0.0 {
        let inv = 1.0 / s;
        p.iter_mut().for_each(|x| *x *= inv);
    }
}

/// Keeps the smallest descending-probability prefix with mass >= top_p, plus every token tied
/// with the boundary token (so the result does not depend on how ties were ordered).
fn apply_top_p(d: &mut Dist, top_p: f64, order: &mut Vec<usize>) {
    order.clear();
    order.extend((0..d.probs.len()).filter(|&i| d.probs[i] > 0.0));
    order.sort_unstable_by(|&a, &b| {
        d.probs[b]
            .partial_cmp(&d.probs[a])
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    let mut acc = 0.0;
    let mut boundary = 0.0;
    for &i in order.iter() {
        acc += d.probs[i];
        boundary = d.probs[i];
        if acc >= top_p {
            break;
        }
    }
    let (tokens, probs) = (&mut d.tokens, &mut d.probs);
    let mut w = 0;
    for r in 0..probs.len() {
        if probs[r] >= boundary && probs[r] > 0.0 {
            tokens[w] = tokens[r];
            probs[w] = probs[r];
            w += 1;
        }
    }
    tokens.truncate(w);
    probs.truncate(w);
    d.dense = false;
    normalise(probs);
}

/// Dense warp of a [rows, vocab] block into `out` (same shape), for the public `warp`.
pub fn warp_dense(
    logits: &[f32],
    vocab: usize,
    params: &SamplingParams,
    out: &mut [f32],
) -> Result<()> {
    check_logits(logits, vocab, "logits")?;
    let mut scratch = Scratch::default();
    let mut d = Dist::default();
    for (row, o) in logits.chunks_exact(vocab).zip(out.chunks_exact_mut(vocab)) {
        warp_row(row, params, &mut scratch, &mut d);
        d.write_dense(o);
    }
    Ok(())
}

/// Checks that every id of `history` lies in [0, vocab).
pub fn check_history(history: &[i64], vocab: usize) -> Result<()> {
    for (i, &t) in history.iter().enumerate() {
        ensure(t >= 0 && (t as u64) < vocab as u64, "history", || {
            format!("entry {i} = {t} is outside [0, V = {vocab})")
        })?;
    }
    Ok(())
}

/// Repetition penalty on a [rows, vocab] block, in place: for every distinct id of `history`,
/// logit / r where the logit is > 0, logit * r otherwise (the convention of transformers'
/// RepetitionPenaltyLogitsProcessor, in float32 as it computes). r = 1 leaves the block as is.
pub fn apply_repetition_penalty(
    logits: &mut [f32],
    vocab: usize,
    history: &[i64],
    r: f32,
) -> Result<()> {
    check_history(history, vocab)?;
    if r == 1.0 || history.is_empty() {
        return Ok(());
    }
    let mut seen = vec![false; vocab];
    for &t in history {
        seen[t as usize] = true;
    }
    for row in logits.chunks_exact_mut(vocab) {
        for (v, _) in row.iter_mut().zip(&seen).filter(|(_, &s)| s) {
            *v = if *v > 0.0 { *v / r } else { *v * r };
        }
    }
    Ok(())
}

/// `logits` with the repetition penalty of `params` applied against `history` (a copy only
/// when the penalty changes something).
pub fn penalised<'a>(
    logits: &'a [f32],
    vocab: usize,
    params: &SamplingParams,
    history: &[i64],
) -> Result<std::borrow::Cow<'a, [f32]>> {
    check_history(history, vocab)?;
    if !params.has_penalty() || history.is_empty() {
        return Ok(std::borrow::Cow::Borrowed(logits));
    }
    let mut owned = logits.to_vec();
    apply_repetition_penalty(&mut owned, vocab, history, params.repetition_penalty)?;
    Ok(std::borrow::Cow::Owned(owned))
}

/// `warp_dense` after the repetition penalty against `history`.
pub fn warp_dense_history(
    logits: &[f32],
    vocab: usize,
    params: &SamplingParams,
    history: &[i64],
    out: &mut [f32],
) -> Result<()> {
    check_logits(logits, vocab, "logits")?;
    let l = penalised(logits, vocab, params, history)?;
    warp_dense(&l, vocab, params, out)
}

/// `sample_rows` after the repetition penalty against `history`.
pub fn sample_rows_history(
    logits: &[f32],
    vocab: usize,
    params: &SamplingParams,
    history: &[i64],
    rng: &mut crate::rng::Generator,
    out: &mut [i32],
) -> Result<()> {
    check_logits(logits, vocab, "logits")?;
    let l = penalised(logits, vocab, params, history)?;
    sample_rows(&l, vocab, params, rng, out)
}

/// One sample per row of a [rows, vocab] block; each row r uses draw (node = r, EMIT).
pub fn sample_rows(
    logits: &[f32],
    vocab: usize,
    params: &SamplingParams,
    rng: &mut crate::rng::Generator,
    out: &mut [i32],
) -> Result<()> {
    check_logits(logits, vocab, "logits")?;
    if params.is_greedy() {
        for (row, o) in logits.chunks_exact(vocab).zip(out.iter_mut()) {
            *o = argmax(row) as i32;
        }
        return Ok(());
    }
    let step = rng.next_step();
    let mut scratch = Scratch::default();
    let mut d = Dist::default();
    for (r, (row, o)) in logits.chunks_exact(vocab).zip(out.iter_mut()).enumerate() {
        warp_row(row, params, &mut scratch, &mut d);
        *o = d.sample(step.uniform(r as u32, crate::rng::slot::EMIT)) as i32;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warp(row: &[f32], t: f32, k: i64, p: f32) -> Vec<f32> {
        let params = SamplingParams::new(t, k, p).unwrap();
        let mut out = vec![0.0; row.len()];
        warp_dense(row, row.len(), &params, &mut out).unwrap();
        out
    }

    #[test]
    fn top_k_breaks_ties_toward_lowest_index() {
        let row = [1.0, 3.0, 3.0, 3.0, 0.0];
        let p = warp(&row, 1.0, 2, 1.0);
        assert_eq!(p[1], 0.5);
        assert_eq!(p[2], 0.5);
        assert_eq!(p[3], 0.0);
    }

    #[test]
    fn top_k_matches_full_sort_on_long_rows() {
        let row: Vec<f32> = (0..3001)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.01)
            .collect();
        let p = warp(&row, 0.7, 50, 1.0);
        let mut idx: Vec<usize> = (0..row.len()).collect();
        idx.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap().then(a.cmp(&b)));
        let kept: Vec<usize> = (0..row.len()).filter(|&i| p[i] > 0.0).collect();
        let mut want = idx[..50].to_vec();
        want.sort();
        assert_eq!(kept, want);
    }

    #[test]
    fn top_p_keeps_boundary_ties() {
        let row = [0.0f32, 0.0, 0.0, -10.0];
        let p = warp(&row, 1.0, 0, 0.4);
        assert!(p[0] > 0.3 && p[1] > 0.3 && p[2] > 0.3);
        assert_eq!(p[3], 0.0);
    }

    #[test]
    fn greedy_is_argmax_and_neg_inf_is_fine() {
        let row = [f32::NEG_INFINITY, 2.0, 5.0, 5.0];
        assert_eq!(warp(&row, 0.0, 0, 1.0), vec![0.0, 0.0, 1.0, 0.0]);
        let p = warp(&row, 1.0, 0, 1.0);
        assert_eq!(p[0], 0.0);
    }

    #[test]
    fn bad_rows_are_named() {
        let e = check_logits(&[0.0, f32::NAN], 2, "logits").unwrap_err();
        assert_eq!(e.arg, "logits");
        assert!(check_logits(&[f32::NEG_INFINITY; 2], 2, "logits").is_err());
        assert!(check_logits(&[0.0, f32::INFINITY], 2, "logits").is_err());
    }

    #[test]
    fn repetition_penalty_follows_the_transformers_convention() {
        let row = [2.0f32, -1.0, 0.5, 0.0, f32::NEG_INFINITY];
        let mut l = row.to_vec();
        apply_repetition_penalty(&mut l, 5, &[0, 1, 1, 3, 4], 2.0).unwrap();
        assert_eq!(l, vec![1.0, -2.0, 0.5, 0.0, f32::NEG_INFINITY]);
        // r = 1 and an empty history leave the row bit-identical.
        let mut l = row.to_vec();
        apply_repetition_penalty(&mut l, 5, &[0, 2], 1.0).unwrap();
        apply_repetition_penalty(&mut l, 5, &[], 3.0).unwrap();
        assert_eq!(l[..4], row[..4]);
    }

    #[test]
    fn repetition_penalty_changes_the_warp_and_greedy_choice() {
        let p = SamplingParams::new(0.0, 0, 1.0)
            .unwrap()
            .with_repetition_penalty(2.0)
            .unwrap();
        let row = [3.0f32, 2.0, -1.0];
        let mut out = [0i32; 1];
        let mut g = crate::rng::Generator::new(1, 0);
        sample_rows_history(&row, 3, &p, &[], &mut g, &mut out).unwrap();
        assert_eq!(out[0], 0);
        sample_rows_history(&row, 3, &p, &[0], &mut g, &mut out).unwrap();
        assert_eq!(out[0], 1);
        let p1 = SamplingParams::new(1.0, 0, 1.0)
            .unwrap()
            .with_repetition_penalty(2.0)
            .unwrap();
        let mut w = [0f32; 3];
        warp_dense_history(&row, 3, &p1, &[0], &mut w).unwrap();
        let z = (1.5f64.exp() + 2f64.exp() + (-1f64).exp()) as f32;
        assert!((w[0] - 1.5f32.exp() / z).abs() < 1e-6);
    }

    #[test]
    fn repetition_penalty_rejects_bad_values_and_ids() {
        let p = SamplingParams::new(1.0, 0, 1.0).unwrap();
        for r in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            assert_eq!(
                p.with_repetition_penalty(r).unwrap_err().arg,
                "repetition_penalty"
            );
        }
        let mut w = [0f32; 2];
        let e = warp_dense_history(&[0.0, 1.0], 2, &p, &[2], &mut w).unwrap_err();
        assert_eq!(e.arg, "history");
        let e = warp_dense_history(&[0.0, 1.0], 2, &p, &[-1], &mut w).unwrap_err();
        assert_eq!(e.arg, "history");
    }

    #[test]
    fn sample_never_leaves_support() {
        let d = Dist {
            vocab: 10,
            tokens: vec![3, 7],
            probs: vec![0.5, 0.5],
            dense: false,
        };
        assert_eq!(d.sample(1e-300), 3);
        assert_eq!(d.sample(1.0), 7);
    }
}

#[cfg(test)]
mod timing {
    use super::*;

    /// `cargo test -p codecspec-core --release -- --ignored --nocapture warp_timing`
    #[test]
    #[ignore]
    fn warp_timing() {
        let row: Vec<f32> = (0..2048u32)
            .map(|i| ((i.wrapping_mul(2654435761) >> 8) % 10_000) as f32 * 1e-3)
            .collect();
        let mut s = Scratch::default();
        let mut d = Dist::default();
        let p = SamplingParams::new(0.9, 50, 1.0).unwrap();
        let n = 20_000;
        let t = std::time::Instant::now();
        for _ in 0..n {
            warp_row(std::hint::black_box(&row), &p, &mut s, &mut d);
        }
        println!("warp_row top-50 of 2048: {:?}", t.elapsed() / n);
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(row_check(std::hint::black_box(&row)));
        }
        println!("row_check 2048: {:?}", t.elapsed() / n);
        let t = std::time::Instant::now();
        for _ in 0..n {
            top_k_candidates(std::hint::black_box(&row), 50, &mut s.cand, &mut s.maxima);
        }
        println!(
            "top_k_candidates: {:?} ({} kept)",
            t.elapsed() / n,
            s.cand.len()
        );
    }
}
