//! Acoustic similarity groups and coarse-grained (PCG) verification.
//!
//! Group k = {t : cos(e_k, e_t) >= threshold} ∪ {k}: one group per token, overlapping. Each
//! token's mass is split evenly among the groups containing it, w[k, t] = 1 / |groups(t)|, so
//! a law p over tokens induces the coarse law P_c(k) = Σ_t w[k, t] p(t) over groups.
//!
//! The coarse verifier accepts a drafted token x by drawing its group k ~ w[·, x] and testing
//! u·Q_c(k) <= P_c(k); on rejection it draws a group from norm(max(P_c − Q_c, 0)) and a token
//! inside it from p weighted by w. The emitted *group* then has exactly the target's coarse law
//! (speculative sampling one level up: Pr[draft group = k] = Q_c(k)). With every group a
//! singleton it is exact speculative sampling, and it consumes the same draws as
//! [`crate::verify::verify_chain`] so the two agree bit for bit.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rayon::prelude::*;

use crate::error::{ensure, Error, Result};
use crate::rng::{slot, Generator, StepRng};
use crate::verify::{check_prob_row, Verified};
use crate::warp::{
    argmax, check_logits, normalise, sample_weights, warp_row, Dist, SamplingParams, Scratch,
};

/// Rows per tile of the blocked similarity computation (a 512 × 512 f32 tile is 1 MiB).
const TILE: usize = 512;

/// Upper bound on similar (unordered) pairs `from_embeddings` will materialise (8 bytes each):
/// past it the threshold is far too low for groups to mean anything.
pub const MAX_PAIRS: usize = 1 << 27;

/// Overlapping token groups stored as CSR both ways (ids ascending within every row).
#[derive(Clone, Debug, PartialEq)]
pub struct AcousticGroups {
    vocab: usize,
    /// Group k's members: `member_ids[member_ptr[k]..member_ptr[k + 1]]`.
    member_ptr: Vec<usize>,
    member_ids: Vec<u32>,
    /// Token t's groups: `group_ids[group_ptr[t]..group_ptr[t + 1]]`.
    group_ptr: Vec<usize>,
    group_ids: Vec<u32>,
    /// w[t] = 1 / |groups(t)| (the same for every group containing t).
    weight: Vec<f64>,
}

/// Float types `coarse` accepts and returns.
pub trait Real: Copy + Send + Sync {
    fn to_f64(self) -> f64;
    fn from_f64(x: f64) -> Self;
}

impl Real for f32 {
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

impl Real for f64 {
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn from_f64(x: f64) -> Self {
        x
    }
}

/// Index in 0..n for a uniform u in (0, 1]: ceil(u·n) − 1, clamped against rounding.
#[inline]
fn pick(u: f64, n: usize) -> usize {
    ((u * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1
}

impl AcousticGroups {
    /// From a validated group → members CSR (members sorted, distinct, every token covered).
    fn from_csr(vocab: usize, member_ptr: Vec<usize>, member_ids: Vec<u32>) -> Self {
        let g = member_ptr.len() - 1;
        let mut count = vec![0usize; vocab];
        for &t in &member_ids {
            count[t as usize] += 1;
        }
        let mut group_ptr = Vec::with_capacity(vocab + 1);
        group_ptr.push(0);
        let mut acc = 0;
        for &c in &count {
            acc += c;
            group_ptr.push(acc);
        }
        let mut fill = group_ptr[..vocab].to_vec();
        let mut group_ids = vec![0u32; member_ids.len()];
        // Groups in ascending order, so every token's list comes out sorted.
        for k in 0..g {
            for &t in &member_ids[member_ptr[k]..member_ptr[k + 1]] {
                group_ids[fill[t as usize]] = k as u32;
                fill[t as usize] += 1;
            }
        }
        let weight = count.iter().map(|&c| 1.0 / c as f64).collect();
        Self {
            vocab,
            member_ptr,
            member_ids,
            group_ptr,
            group_ids,
            weight,
        }
    }

    /// Groups given explicitly. Each group must be non-empty with distinct ids in
    /// [0, vocab_size) (any order; stored sorted), and every token must be in some group.
    pub fn from_members(members: Vec<Vec<u32>>, vocab_size: usize) -> Result<Self> {
        ensure(vocab_size > 0, "vocab_size", || "must be > 0".into())?;
        ensure(members.len() <= u32::MAX as usize, "members", || {
            format!("at most {} groups, got {}", u32::MAX, members.len())
        })?;
        let mut member_ptr = Vec::with_capacity(members.len() + 1);
        member_ptr.push(0);
        let mut member_ids = Vec::with_capacity(members.iter().map(Vec::len).sum());
        let mut covered = vec![false; vocab_size];
        for (k, mut m) in members.into_iter().enumerate() {
            ensure(!m.is_empty(), "members", || format!("group {k} is empty"))?;
            if let Some(&t) = m.iter().find(|&&t| t as usize >= vocab_size) {
                return Err(Error::new(
                    "members",
                    format!("group {k} holds token {t}, outside [0, {vocab_size})"),
                ));
            }
            m.sort_unstable();
            if let Some(w) = m.windows(2).find(|w| w[0] == w[1]) {
                return Err(Error::new(
                    "members",
                    format!("group {k} lists token {} twice", w[0]),
                ));
            }
            for &t in &m {
                covered[t as usize] = true;
            }
            member_ids.extend_from_slice(&m);
            member_ptr.push(member_ids.len());
        }
        if let Some(t) = covered.iter().position(|&c| !c) {
            return Err(Error::new(
                "members",
                format!("token {t} belongs to no group (every token needs at least one)"),
            ));
        }
        Ok(Self::from_csr(vocab_size, member_ptr, member_ids))
    }

    /// Group k = {t : cos(e_k, e_t) >= threshold} ∪ {k} for the rows of `emb` [V, dim].
    /// Tokens in `singletons` form a group of their own and belong to no other group.
    ///
    /// The cosine matrix is computed in f32 in 512-row tiles (one sgemm per tile pair, upper
    /// triangle only, tiles in parallel), so membership is exactly symmetric.
    pub fn from_embeddings(
        emb: &[f32],
        dim: usize,
        threshold: f32,
        singletons: &[u32],
    ) -> Result<Self> {
        ensure(dim > 0, "emb", || "embedding dimension must be > 0".into())?;
        ensure(
            emb.len().checked_rem(dim) == Some(0) && !emb.is_empty(),
            "emb",
            || {
                format!(
                    "expected shape [V, {dim}] with V > 0, got {} values",
                    emb.len()
                )
            },
        )?;
        let v = emb.len() / dim;
        ensure(v <= u32::MAX as usize, "emb", || {
            format!("at most {} rows, got {v}", u32::MAX)
        })?;
        ensure(threshold.is_finite(), "threshold", || {
            format!("must be finite, got {threshold}")
        })?;
        let mut single = vec![false; v];
        for &s in singletons {
            ensure((s as usize) < v, "singletons", || {
                format!("token {s} is outside [0, {v})")
            })?;
            single[s as usize] = true;
        }
        let e = normalised_rows(emb, dim)?;
        let pairs = similar_pairs(&e, v, dim, threshold, &single)?;

        let mut deg = vec![1usize; v];
        for part in &pairs {
            for &(i, j) in part {
                deg[i as usize] += 1;
                deg[j as usize] += 1;
            }
        }
        let mut ptr = Vec::with_capacity(v + 1);
        ptr.push(0);
        let mut acc = 0;
        for &d in &deg {
            acc += d;
            ptr.push(acc);
        }
        let mut ids = vec![0u32; acc];
        let mut fill = ptr[..v].to_vec();
        for (t, f) in fill.iter_mut().enumerate() {
            ids[*f] = t as u32;
            *f += 1;
        }
        for part in &pairs {
            for &(i, j) in part {
                ids[fill[i as usize]] = j;
                fill[i as usize] += 1;
                ids[fill[j as usize]] = i;
                fill[j as usize] += 1;
            }
        }
        drop(pairs);
        for t in 0..v {
            ids[ptr[t]..ptr[t + 1]].sort_unstable();
        }
        Ok(Self::from_csr(v, ptr, ids))
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    pub fn num_groups(&self) -> usize {
        self.member_ptr.len() - 1
    }

    /// Stored (group, token) pairs.
    pub fn nnz(&self) -> usize {
        self.member_ids.len()
    }

    /// Group k's members, ascending. Panics if k >= num_groups.
    pub fn members(&self, k: usize) -> &[u32] {
        &self.member_ids[self.member_ptr[k]..self.member_ptr[k + 1]]
    }

    /// The groups containing token t, ascending. Panics if t >= vocab_size.
    pub fn groups_of(&self, t: usize) -> &[u32] {
        &self.group_ids[self.group_ptr[t]..self.group_ptr[t + 1]]
    }

    /// w[k, t] for any group k containing t.
    pub fn weight(&self, t: usize) -> f64 {
        self.weight[t]
    }

    /// Coarse laws: `probs` [rows, V] → `out` [rows, G], P_c(k) = Σ_t w[k, t] p(t), summed
    /// in f64. Entries must be finite and >= 0 (rows need not sum to 1).
    pub fn coarse<T: Real>(&self, probs: &[T], out: &mut [T]) -> Result<()> {
        let (v, g) = (self.vocab, self.num_groups());
        ensure(probs.len().checked_rem(v) == Some(0), "probs", || {
            format!(
                "length {} is not a multiple of V = {v} (expected shape [..., {v}])",
                probs.len()
            )
        })?;
        let rows = probs.len() / v;
        ensure(out.len() == rows * g, "out", || {
            format!("expected {} values, got {}", rows * g, out.len())
        })?;
        if let Some(i) = probs
            .iter()
            .position(|&x| !(x.to_f64() >= 0.0 && x.to_f64() < f64::INFINITY))
        {
            return Err(Error::new(
                "probs",
                format!(
                    "row {} holds {}: probabilities must be finite and >= 0",
                    i / v,
                    probs[i].to_f64()
                ),
            ));
        }
        if rows == 0 || g == 0 {
            return Ok(());
        }
        let one = |(p, o): (&[T], &mut [T])| {
            for (k, ok) in o.iter_mut().enumerate() {
                let s: f64 = self
                    .members(k)
                    .iter()
                    .map(|&t| self.weight[t as usize] * p[t as usize].to_f64())
                    .sum();
                *ok = T::from_f64(s);
            }
        };
        if rows > 1 && rows * (self.nnz() + v) >= 1 << 18 {
            probs.par_chunks(v).zip(out.par_chunks_mut(g)).for_each(one);
        } else {
            probs.chunks(v).zip(out.chunks_mut(g)).for_each(one);
        }
        Ok(())
    }

    /// P_c(k) for a warped target law.
    #[inline]
    pub(crate) fn mass_p(&self, k: usize, p: &Dist) -> f64 {
        self.members(k)
            .iter()
            .map(|&t| self.weight[t as usize] * p.prob(t))
            .sum()
    }

    /// Q_c(k) for a draft row; q(t) = row[t] / row_sum exactly as the exact verifier reads it.
    #[inline]
    fn mass_q(&self, k: usize, q: &[f32], q_sum: f64) -> f64 {
        self.members(k)
            .iter()
            .map(|&t| self.weight[t as usize] * (q[t as usize] as f64 / q_sum))
            .sum()
    }

    /// Lowest group containing both a and b.
    pub(crate) fn common_group(&self, a: usize, b: usize) -> Option<u32> {
        let (ga, gb) = (self.groups_of(a), self.groups_of(b));
        let (mut i, mut j) = (0, 0);
        while i < ga.len() && j < gb.len() {
            match ga[i].cmp(&gb[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => return Some(ga[i]),
            }
        }
        None
    }

    /// A group of token t drawn from w[·, t] (uniform over the groups containing t).
    #[inline]
    pub(crate) fn draw_group(&self, t: usize, u: f64) -> u32 {
        let gs = self.groups_of(t);
        gs[pick(u, gs.len())]
    }

    /// Groups that hold at least one token of positive p, ascending, into `out`.
    pub(crate) fn touched_groups(&self, p: &Dist, out: &mut Vec<u32>) {
        out.clear();
        let g = self.num_groups();
        let support = p.probs.iter().filter(|&&x| x > 0.0).count();
        // Expected touched entries vs. just taking every group.
        let est = support.saturating_mul(self.nnz()) / self.vocab.max(1);
        if p.dense || est.saturating_mul(4) >= g {
            out.extend(0..g as u32);
            return;
        }
        for (&t, &pr) in p.tokens.iter().zip(&p.probs) {
            if pr > 0.0 {
                out.extend_from_slice(self.groups_of(t as usize));
            }
        }
        out.sort_unstable();
        out.dedup();
    }
}

/// Rows scaled to unit norm; NaN/inf entries and zero rows are errors naming `emb`.
fn normalised_rows(emb: &[f32], dim: usize) -> Result<Vec<f32>> {
    let mut e = vec![0f32; emb.len()];
    for (r, (row, out)) in emb
        .chunks_exact(dim)
        .zip(e.chunks_exact_mut(dim))
        .enumerate()
    {
        if row.iter().any(|x| !x.is_finite()) {
            return Err(Error::new("emb", format!("row {r} holds NaN or inf")));
        }
        let n2: f64 = row.iter().map(|&x| x as f64 * x as f64).sum();
        if n2 == 0.0 {
            return Err(Error::new(
                "emb",
                format!("row {r} is all zeros (its cosine similarity is undefined)"),
            ));
        }
        let inv = 1.0 / n2.sqrt();
        for (o, &x) in out.iter_mut().zip(row) {
            *o = (x as f64 * inv) as f32;
        }
    }
    Ok(e)
}

/// Does any entry reach `th`? Branch-free over fixed chunks so it vectorises.
#[inline]
fn any_at_least(c: &[f32], th: f32) -> bool {
    c.iter().fold(false, |acc, &x| acc | (x >= th))
}

/// Every unordered pair i < j of non-singleton tokens with cos(e_i, e_j) >= th, in several
/// lists. Uses the fused AVX2/FMA kernel where the CPU has it, else tiled sgemm.
fn similar_pairs(
    e: &[f32],
    v: usize,
    dim: usize,
    th: f32,
    single: &[bool],
) -> Result<Vec<Vec<(u32, u32)>>> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            return fused::similar_pairs(e, v, dim, th, single);
        }
    }
    similar_pairs_gemm(e, v, dim, th, single)
}

/// Counts pairs across tasks and trips once there are more than MAX_PAIRS.
struct PairBudget {
    total: AtomicUsize,
    overflow: AtomicBool,
}

impl PairBudget {
    fn new() -> Self {
        Self {
            total: AtomicUsize::new(0),
            overflow: AtomicBool::new(false),
        }
    }

    fn exhausted(&self) -> bool {
        self.overflow.load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        if self.total.fetch_add(n, Ordering::Relaxed) + n > MAX_PAIRS {
            self.overflow.store(true, Ordering::Relaxed);
        }
    }

    fn finish<T>(&self, th: f32, out: T) -> Result<T> {
        if self.exhausted() {
            return Err(Error::new(
                "threshold",
                format!(
                    "more than {MAX_PAIRS} token pairs reach cosine {th}: groups would be huge; \
                     raise the threshold"
                ),
            ));
        }
        Ok(out)
    }
}

/// Portable path: TILE × TILE blocks of the cosine matrix with matrixmultiply's sgemm, upper
/// triangle tile pairs only, scanned for entries >= th.
fn similar_pairs_gemm(
    e: &[f32],
    v: usize,
    dim: usize,
    th: f32,
    single: &[bool],
) -> Result<Vec<Vec<(u32, u32)>>> {
    let nt = v.div_ceil(TILE);
    let tiles: Vec<(usize, usize)> = (0..nt).flat_map(|a| (a..nt).map(move |b| (a, b))).collect();
    let budget = PairBudget::new();
    let pairs: Vec<Vec<(u32, u32)>> = tiles
        .par_iter()
        .map_init(
            || vec![0f32; TILE * TILE],
            |c, &(a, b)| {
                let mut out = Vec::new();
                if budget.exhausted() {
                    return out;
                }
                let (ra, rb) = (a * TILE, b * TILE);
                let m = TILE.min(v - ra);
                let n = TILE.min(v - rb);
                // c[m, n] = E_a · E_bᵀ: B is E_b read with row stride 1, column stride dim.
                // Safety: the pointers cover m·dim and n·dim values of `e` and m·n of `c`.
                unsafe {
                    matrixmultiply::sgemm(
                        m,
                        dim,
                        n,
                        1.0,
                        e[ra * dim..].as_ptr(),
                        dim as isize,
                        1,
                        e[rb * dim..].as_ptr(),
                        1,
                        dim as isize,
                        0.0,
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                    );
                }
                for i in 0..m {
                    let gi = ra + i;
                    if single[gi] {
                        continue;
                    }
                    let start = if a == b { i + 1 } else { 0 };
                    let row = &c[i * n..(i + 1) * n];
                    let mut j0 = start;
                    while j0 < n {
                        let j1 = (j0 + 32).min(n);
                        if any_at_least(&row[j0..j1], th) {
                            for (j, &x) in row[j0..j1].iter().enumerate() {
                                let gj = rb + j0 + j;
                                if x >= th && !single[gj] {
                                    out.push((gi as u32, gj as u32));
                                }
                            }
                        }
                        j0 = j1;
                    }
                }
                budget.add(out.len());
                out
            },
        )
        .collect();
    budget.finish(th, pairs)
}

/// AVX2/FMA path: E is packed once into 6-row panels (broadcast side) and 16-row panels (load
/// side); a 6 × 16 register-blocked kernel accumulates each block of dot products and compares
/// it with the threshold in registers, so no similarity tile is ever stored.
///
/// Exact pruning: dimensions are visited in decreasing order of energy Σ_t e[t, d]², and at a
/// few checkpoints k the kernel stops when every pair of the block has
/// partial_k(a, b) + ‖a[k..]‖·‖b[k..]‖ < threshold (Cauchy–Schwarz bounds the rest of the dot
/// product), plus a slack that covers f32 rounding. Unrelated tokens are nearly orthogonal, so
/// most blocks stop after half to three quarters of the dimensions.
///
/// Tasks are (96-row, 2048-column) blocks on or above the diagonal.
#[cfg(target_arch = "x86_64")]
mod fused {
    use std::arch::x86_64::*;

    use rayon::prelude::*;

    use super::{PairBudget, Result};

    const MR: usize = 6;
    const NR: usize = 16;
    /// Panels per task: 16 × 6 = 96 rows (~100 KiB packed at D = 256, stays in L2) against
    /// 128 × 16 = 2048 columns.
    const BLOCK_A: usize = 16;
    const BLOCK_B: usize = 128;
    /// Added to the pruning bound: f32 partial sums and norms are off by ~1e-5 at most.
    const SLACK: f32 = 1e-4;

    /// A 32-byte aligned f32 buffer (aligned loads never split cache lines).
    struct Aligned {
        buf: Vec<f32>,
        off: usize,
    }

    impl Aligned {
        fn zeros(len: usize) -> Self {
            let buf = vec![0f32; len + 8];
            let off = buf.as_ptr().align_offset(32).min(8);
            Self { buf, off }
        }
        fn slice_mut(&mut self) -> &mut [f32] {
            let n = self.buf.len() - 8;
            &mut self.buf[self.off..self.off + n]
        }
        fn slice(&self) -> &[f32] {
            let n = self.buf.len() - 8;
            &self.buf[self.off..self.off + n]
        }
    }

    /// Dimensions by decreasing energy (ties: lower index first).
    fn dim_order(e: &[f32], dim: usize) -> Vec<usize> {
        let mut energy = vec![0f64; dim];
        for row in e.chunks_exact(dim) {
            for (acc, &x) in energy.iter_mut().zip(row) {
                *acc += x as f64 * x as f64;
            }
        }
        let mut order: Vec<usize> = (0..dim).collect();
        order.sort_by(|&a, &b| energy[b].total_cmp(&energy[a]).then(a.cmp(&b)));
        order
    }

    /// Where the kernel tests the bound: from dim/2 on, every dim/16 (none for small dims).
    fn checkpoints(dim: usize) -> Vec<usize> {
        if dim < 64 {
            return Vec::new();
        }
        (dim / 2..dim).step_by((dim / 16).max(8)).collect()
    }

    /// Panel p holds rows p·w .. p·w + w (zero past v), laid out [dim][w] in `order`; its tails
    /// [checkpoint][w] hold ‖row[order[cp..]]‖ rounded up.
    fn pack(
        e: &[f32],
        v: usize,
        dim: usize,
        w: usize,
        order: &[usize],
        cps: &[usize],
    ) -> (Aligned, Aligned) {
        let np = v.div_ceil(w);
        let nc = cps.len();
        let mut panels = Aligned::zeros(np * dim * w);
        // One chunk per panel even without checkpoints (zip stops at the shorter side).
        let tail_chunk = (nc * w).max(1);
        let mut tails = Aligned::zeros(np * tail_chunk);
        panels
            .slice_mut()
            .par_chunks_mut(dim * w)
            .zip(tails.slice_mut().par_chunks_mut(tail_chunk))
            .enumerate()
            .for_each(|(p, (panel, tail))| {
                for r in 0..w {
                    let t = p * w + r;
                    if t >= v {
                        break;
                    }
                    let row = &e[t * dim..(t + 1) * dim];
                    for (k, &d) in order.iter().enumerate() {
                        panel[k * w + r] = row[d];
                    }
                    for (c, &cp) in cps.iter().enumerate() {
                        let s: f64 = order[cp..]
                            .iter()
                            .map(|&d| row[d] as f64 * row[d] as f64)
                            .sum();
                        tail[c * w + r] = (s.sqrt() * (1.0 + 1e-6)) as f32;
                    }
                }
            });
        (panels, tails)
    }

    /// acc[2r + h] += Σ_{k in k0..k1} a[k·6 + r] · b[k·16 + 8h ..][..8].
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn fma_range(
        acc: &mut [__m256; 12],
        a: *const f32,
        b: *const f32,
        k0: usize,
        k1: usize,
    ) {
        let [mut c00, mut c01, mut c10, mut c11, mut c20, mut c21, mut c30, mut c31, mut c40, mut c41, mut c50, mut c51] =
            *acc;
        let (mut ap, mut bp) = (a.add(k0 * MR), b.add(k0 * NR));
        for _ in k0..k1 {
            let b0 = _mm256_load_ps(bp);
            let b1 = _mm256_load_ps(bp.add(8));
            let x = _mm256_broadcast_ss(&*ap);
            c00 = _mm256_fmadd_ps(x, b0, c00);
            c01 = _mm256_fmadd_ps(x, b1, c01);
            let x = _mm256_broadcast_ss(&*ap.add(1));
            c10 = _mm256_fmadd_ps(x, b0, c10);
            c11 = _mm256_fmadd_ps(x, b1, c11);
            let x = _mm256_broadcast_ss(&*ap.add(2));
            c20 = _mm256_fmadd_ps(x, b0, c20);
            c21 = _mm256_fmadd_ps(x, b1, c21);
            let x = _mm256_broadcast_ss(&*ap.add(3));
            c30 = _mm256_fmadd_ps(x, b0, c30);
            c31 = _mm256_fmadd_ps(x, b1, c31);
            let x = _mm256_broadcast_ss(&*ap.add(4));
            c40 = _mm256_fmadd_ps(x, b0, c40);
            c41 = _mm256_fmadd_ps(x, b1, c41);
            let x = _mm256_broadcast_ss(&*ap.add(5));
            c50 = _mm256_fmadd_ps(x, b0, c50);
            c51 = _mm256_fmadd_ps(x, b1, c51);
            ap = ap.add(MR);
            bp = bp.add(NR);
        }
        *acc = [c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51];
    }

    /// 16-bit masks: bit c of masks[r] = (Σ_k a[k·6 + r] · b[k·16 + c] >= th), or all zero
    /// once the tail bound rules the whole block out.
    ///
    /// Safety: requires AVX2 and FMA; `a` holds dim·6 floats and `ta` cps.len()·6; `b` holds
    /// dim·16 floats and `tb` cps.len()·16, both 32-byte aligned.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn kernel(
        dim: usize,
        a: *const f32,
        b: *const f32,
        ta: *const f32,
        tb: *const f32,
        cps: &[usize],
        th: f32,
    ) -> [u32; MR] {
        let mut acc = [_mm256_setzero_ps(); 12];
        let mut k = 0;
        let bound = _mm256_set1_ps(th - SLACK);
        for (c, &cp) in cps.iter().enumerate() {
            fma_range(&mut acc, a, b, k, cp);
            k = cp;
            let t0 = _mm256_load_ps(tb.add(c * NR));
            let t1 = _mm256_load_ps(tb.add(c * NR + 8));
            let mut any = 0;
            for r in 0..MR {
                let x = _mm256_broadcast_ss(&*ta.add(c * MR + r));
                let lo = _mm256_fmadd_ps(x, t0, acc[2 * r]);
                let hi = _mm256_fmadd_ps(x, t1, acc[2 * r + 1]);
                any |= _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(lo, bound))
                    | _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(hi, bound));
            }
            if any == 0 {
                return [0; MR];
            }
        }
        fma_range(&mut acc, a, b, k, dim);
        let t = _mm256_set1_ps(th);
        let mut masks = [0u32; MR];
        for (r, m) in masks.iter_mut().enumerate() {
            let l = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(acc[2 * r], t)) as u32;
            let h = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(acc[2 * r + 1], t)) as u32;
            *m = l | (h << 8);
        }
        masks
    }

    pub(super) fn similar_pairs(
        e: &[f32],
        v: usize,
        dim: usize,
        th: f32,
        single: &[bool],
    ) -> Result<Vec<Vec<(u32, u32)>>> {
        let (npa, npb) = (v.div_ceil(MR), v.div_ceil(NR));
        let order = dim_order(e, dim);
        let cps = checkpoints(dim);
        let nc = cps.len();
        let (ap, ta) = pack(e, v, dim, MR, &order, &cps);
        let (bp, tb) = pack(e, v, dim, NR, &order, &cps);
        let (ap, bp, ta, tb) = (ap.slice(), bp.slice(), ta.slice(), tb.slice());
        // Blocks holding at least one pair i < j.
        let tasks: Vec<(usize, usize)> = (0..npa)
            .step_by(BLOCK_A)
            .flat_map(|pa| {
                (0..npb)
                    .step_by(BLOCK_B)
                    .filter(move |&pb| ((pb + BLOCK_B).min(npb) * NR).min(v) > pa * MR + 1)
                    .map(move |pb| (pa, pb))
            })
            .collect();
        let budget = PairBudget::new();
        let pairs: Vec<Vec<(u32, u32)>> = tasks
            .par_iter()
            .map(|&(pa0, pb0)| {
                let mut out = Vec::new();
                if budget.exhausted() {
                    return out;
                }
                let pa1 = (pa0 + BLOCK_A).min(npa);
                for pb in pb0..(pb0 + BLOCK_B).min(npb) {
                    let j0 = pb * NR;
                    let b = &bp[pb * dim * NR..(pb + 1) * dim * NR];
                    let tbp = tb[pb * nc * NR..].as_ptr();
                    for pa in pa0..pa1 {
                        let i0 = pa * MR;
                        if j0 + NR <= i0 + 1 {
                            continue; // every j <= i here
                        }
                        let a = &ap[pa * dim * MR..(pa + 1) * dim * MR];
                        let tap = ta[pa * nc * MR..].as_ptr();
                        // Safety: the caller checked AVX2 + FMA; panels and tails are whole
                        // (nc·6 resp. nc·16 tails per panel). B panels (64·dim bytes) and B
                        // tails (64·nc bytes) start 32-byte aligned for the vector loads; the
                        // A side is only read by scalar broadcasts.
                        let masks =
                            unsafe { kernel(dim, a.as_ptr(), b.as_ptr(), tap, tbp, &cps, th) };
                        for (r, &mask) in masks.iter().enumerate() {
                            let i = i0 + r;
                            if mask == 0 || i >= v || single[i] {
                                continue;
                            }
                            let mut bits = mask;
                            while bits != 0 {
                                let j = j0 + bits.trailing_zeros() as usize;
                                bits &= bits - 1;
                                if j > i && j < v && !single[j] {
                                    out.push((i as u32, j as u32));
                                }
                            }
                        }
                    }
                }
                budget.add(out.len());
                out
            })
            .collect();
        budget.finish(th, pairs)
    }
}

/// Coarse-grained chain verification (PCG). `target_logits` [K+1, V] (row j = target after
/// draft j, row K = bonus position), `draft_tokens` [K], `draft_probs` [K, V] (row j = the law
/// draft j was drawn from; required), V = `groups.vocab_size()`.
///
/// Returns the verified tokens/nodes and the group id of every emitted token; the law of the
/// emitted groups equals the target's coarse law. Draws at chain node j: GROUP (the drafted
/// token's group), ACCEPT (the test), EMIT (the residual group, or the bonus token at node K),
/// MEMBER (the token inside the residual group).
///
/// Greedy (temperature 0) draws nothing and leaves `rng` as it was: with a = argmax of row j,
/// draft j is accepted iff it shares a group with a (emitted with the lowest such group);
/// otherwise a is emitted with its lowest group. The draft probabilities are validated but
/// unused there, as in `verify_chain`.
pub fn verify_chain_coarse(
    groups: &AcousticGroups,
    target_logits: &[f32],
    draft_tokens: &[i32],
    draft_probs: &[f32],
    params: &SamplingParams,
    rng: &mut Generator,
) -> Result<(Verified, Vec<i32>)> {
    let v = groups.vocab_size();
    let k = draft_tokens.len();
    ensure(k < u32::MAX as usize, "draft_tokens", || {
        format!("too many drafts ({k})")
    })?;
    ensure(target_logits.len() == (k + 1) * v, "target_logits", || {
        format!(
            "expected shape [{}, {v}] (one row per draft plus the bonus row; V = the groups' \
                 vocab_size), got {} values",
            k + 1,
            target_logits.len()
        )
    })?;
    check_logits(target_logits, v, "target_logits")?;
    for (j, &x) in draft_tokens.iter().enumerate() {
        ensure(x >= 0 && (x as usize) < v, "draft_tokens", || {
            format!("draft {j} is token {x}, outside [0, {v})")
        })?;
    }
    ensure(draft_probs.len() == k * v, "draft_probs", || {
        format!(
            "expected shape [{k}, {v}], got {} values",
            draft_probs.len()
        )
    })?;
    for (j, row) in draft_probs.chunks_exact(v).enumerate() {
        check_prob_row(row, j, "draft_probs")?;
    }
    if params.is_greedy() {
        return Ok(coarse_greedy(groups, target_logits, draft_tokens));
    }
    let step = rng.next_step();
    Ok(coarse_sampled(
        groups,
        target_logits,
        draft_tokens,
        draft_probs,
        params,
        &step,
    ))
}

fn coarse_greedy(
    groups: &AcousticGroups,
    target_logits: &[f32],
    draft_tokens: &[i32],
) -> (Verified, Vec<i32>) {
    let v = groups.vocab_size();
    let mut out = Verified::default();
    let mut gids = Vec::with_capacity(draft_tokens.len() + 1);
    for (j, &x) in draft_tokens.iter().enumerate() {
        let a = argmax(&target_logits[j * v..(j + 1) * v]) as usize;
        match groups.common_group(x as usize, a) {
            Some(g) => {
                out.tokens.push(x);
                out.nodes.push(j as i32 + 1);
                gids.push(g as i32);
            }
            None => {
                out.tokens.push(a as i32);
                gids.push(groups.groups_of(a)[0] as i32);
                return (out, gids);
            }
        }
    }
    let k = draft_tokens.len();
    let a = argmax(&target_logits[k * v..(k + 1) * v]) as usize;
    out.tokens.push(a as i32);
    gids.push(groups.groups_of(a)[0] as i32);
    (out, gids)
}

fn coarse_sampled(
    groups: &AcousticGroups,
    target_logits: &[f32],
    draft_tokens: &[i32],
    draft_probs: &[f32],
    params: &SamplingParams,
    step: &StepRng,
) -> (Verified, Vec<i32>) {
    let v = groups.vocab_size();
    let k = draft_tokens.len();
    let mut scratch = Scratch::default();
    let mut p = Dist::default();
    let mut out = Verified::default();
    let mut gids = Vec::with_capacity(k + 1);
    for (j, &x) in draft_tokens.iter().enumerate() {
        let node = j as u32;
        warp_row(
            &target_logits[j * v..(j + 1) * v],
            params,
            &mut scratch,
            &mut p,
        );
        let q = &draft_probs[j * v..(j + 1) * v];
        // Same expression as the exact verifier's draft law, so singleton groups match it.
        let q_sum: f64 = q.iter().map(|&y| y as f64).sum();
        let x = x as usize;
        let g = groups.draw_group(x, step.uniform(node, slot::GROUP)) as usize;
        let (pc, qc) = (groups.mass_p(g, &p), groups.mass_q(g, q, q_sum));
        let u = step.uniform(node, slot::ACCEPT);
        // Q_c(k) = 0 means this group could not have been drafted: reject, never divide.
        if qc > 0.0 && u * qc <= pc {
            out.tokens.push(x as i32);
            out.nodes.push(j as i32 + 1);
            gids.push(g as i32);
            continue;
        }
        let (g2, t2) = resample(groups, &p, q, q_sum, step, node);
        out.tokens.push(t2 as i32);
        gids.push(g2 as i32);
        return (out, gids);
    }
    warp_row(
        &target_logits[k * v..(k + 1) * v],
        params,
        &mut scratch,
        &mut p,
    );
    let y = p.sample(step.uniform(k as u32, slot::EMIT));
    out.tokens.push(y as i32);
    gids.push(groups.draw_group(y as usize, step.uniform(k as u32, slot::GROUP)) as i32);
    (out, gids)
}

/// After a rejection at `node`: group k' ~ norm(max(P_c − Q_c, 0)) (all zero → P_c) over the
/// groups touching p's support, ascending; then a token of k' ~ p·w[k', ·]. Cost: the touched
/// groups' members, not the whole vocabulary (unless p is dense).
fn resample(
    groups: &AcousticGroups,
    p: &Dist,
    q: &[f32],
    q_sum: f64,
    step: &StepRng,
    node: u32,
) -> (u32, u32) {
    let mut touched = Vec::new();
    groups.touched_groups(p, &mut touched);
    let pc: Vec<f64> = touched
        .iter()
        .map(|&k| groups.mass_p(k as usize, p))
        .collect();
    let mut res: Vec<f64> = touched
        .iter()
        .zip(&pc)
        .map(|(&k, &pk)| (pk - groups.mass_q(k as usize, q, q_sum)).max(0.0))
        .collect();
    let u = step.uniform(node, slot::EMIT);
    let g = if res.iter().any(|&r| r > 0.0) {
        normalise(&mut res);
        sample_weights(&touched, &res, u)
    } else {
        sample_weights(&touched, &pc, u)
    };
    let mem = groups.members(g as usize);
    let w: Vec<f64> = mem
        .iter()
        .map(|&t| groups.weight[t as usize] * p.prob(t))
        .collect();
    (g, sample_weights(mem, &w, step.uniform(node, slot::MEMBER)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::verify_chain;

    fn lcg(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(state: &mut u64) -> f32 {
        let (a, b) = (lcg(state), lcg(state));
        ((-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()) as f32
    }

    fn random_probs(state: &mut u64, v: usize, zeros: bool) -> Vec<f32> {
        let mut r: Vec<f64> = (0..v)
            .map(|_| {
                let x = lcg(state);
                if zeros && x < 0.3 {
                    0.0
                } else {
                    x
                }
            })
            .collect();
        if r.iter().all(|&x| x == 0.0) {
            r[0] = 1.0;
        }
        let s: f64 = r.iter().sum();
        r.iter().map(|&x| (x / s) as f32).collect()
    }

    /// Brute-force reference for from_embeddings.
    fn brute(emb: &[f32], dim: usize, th: f32, singles: &[u32]) -> Vec<Vec<u32>> {
        let v = emb.len() / dim;
        let e = normalised_rows(emb, dim).unwrap();
        (0..v)
            .map(|k| {
                if singles.contains(&(k as u32)) {
                    return vec![k as u32];
                }
                (0..v)
                    .filter(|&t| {
                        t == k
                            || (!singles.contains(&(t as u32)) && {
                                let d: f32 =
                                    (0..dim).map(|i| e[k * dim + i] * e[t * dim + i]).sum();
                                d >= th
                            })
                    })
                    .map(|t| t as u32)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn members_and_groups_of_are_transposes() {
        let g = AcousticGroups::from_members(vec![vec![2, 0], vec![1], vec![0, 1, 2]], 3).unwrap();
        assert_eq!(g.num_groups(), 3);
        assert_eq!(g.members(0), &[0, 2]);
        assert_eq!(g.groups_of(0), &[0, 2]);
        assert_eq!(g.groups_of(1), &[1, 2]);
        assert_eq!(g.groups_of(2), &[0, 2]);
        assert_eq!(g.weight(0), 0.5);
        let probs = [0.2f64, 0.3, 0.5, 1.0, 0.0, 0.0];
        let mut out = [0.0f64; 6];
        g.coarse(&probs, &mut out).unwrap();
        let want = [0.1 + 0.25, 0.15, 0.1 + 0.15 + 0.25, 0.5, 0.0, 0.5];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{out:?}");
        }
        let s: f64 = out[..3].iter().sum();
        assert!((s - 1.0).abs() < 1e-12);
    }

    #[test]
    fn from_members_errors_name_the_argument() {
        let e = |m: Vec<Vec<u32>>, v| AcousticGroups::from_members(m, v).unwrap_err();
        assert_eq!(e(vec![vec![0], vec![]], 1).arg, "members");
        assert_eq!(e(vec![vec![0, 3]], 3).arg, "members");
        assert_eq!(e(vec![vec![0, 1, 0]], 2).arg, "members");
        assert_eq!(e(vec![vec![0]], 2).arg, "members");
        assert_eq!(e(vec![], 0).arg, "vocab_size");
        let g = AcousticGroups::from_members(vec![vec![0, 1]], 2).unwrap();
        assert_eq!(
            g.coarse(&[0.5f32, f32::NAN], &mut [0.0]).unwrap_err().arg,
            "probs"
        );
        assert_eq!(g.coarse(&[0.5f32], &mut [0.0]).unwrap_err().arg, "probs");
    }

    #[test]
    fn from_embeddings_matches_brute_force() {
        // Several tiles (V > TILE) with clustered rows so groups are non-trivial.
        let (v, dim) = (1100, 12);
        let mut s = 5u64;
        let centres: Vec<f32> = (0..200 * dim).map(|_| normal(&mut s)).collect();
        let emb: Vec<f32> = (0..v)
            .flat_map(|t| {
                let c = (t * 7) % 200;
                let noise: Vec<f32> = (0..dim).map(|_| 0.45 * normal(&mut s)).collect();
                (0..dim)
                    .map(|i| centres[c * dim + i] + noise[i])
                    .collect::<Vec<_>>()
            })
            .collect();
        let singles = [3u32, 17, 700];
        for (th, sg) in [(0.8f32, &[][..]), (0.7, &singles[..])] {
            let g = AcousticGroups::from_embeddings(&emb, dim, th, sg).unwrap();
            let want = brute(&emb, dim, th, sg);
            assert_eq!(g.num_groups(), v);
            let mut nontrivial = 0;
            for k in 0..v {
                // The f32 dot products of sgemm and the naive sum may differ in the last bits;
                // only pairs within 1e-5 of the threshold may disagree.
                if g.members(k) != want[k].as_slice() {
                    let e = normalised_rows(&emb, dim).unwrap();
                    let (a, b) = (g.members(k), &want[k]);
                    for &t in a.iter().chain(b.iter()) {
                        if a.contains(&t) != b.contains(&t) {
                            let d: f32 = (0..dim)
                                .map(|i| e[k * dim + i] * e[t as usize * dim + i])
                                .sum();
                            assert!((d - th).abs() < 1e-5, "group {k} token {t}: cos {d}");
                        }
                    }
                }
                assert_eq!(g.members(k), g.groups_of(k), "symmetric");
                assert!(g.members(k).contains(&(k as u32)));
                nontrivial += (g.members(k).len() > 2) as usize;
            }
            assert!(nontrivial > 50, "{nontrivial}");
            for &s in sg {
                assert_eq!(g.members(s as usize), &[s]);
                assert_eq!(g.groups_of(s as usize), &[s]);
            }
        }
    }

    #[test]
    fn fused_kernel_and_sgemm_agree() {
        // Odd sizes: V not a multiple of 6, 16 or TILE; odd dim; a singleton. dim >= 64 runs
        // the pruning checkpoints; the scaled case makes dimensions unequal in energy.
        for (v, dim, anisotropic) in [(1037, 19, false), (1037, 96, false), (777, 256, true)] {
            let mut s = 9u64;
            let centres: Vec<f32> = (0..150 * dim).map(|_| normal(&mut s)).collect();
            let scale = |i: usize| {
                if anisotropic {
                    4.0 / (1.0 + i as f32 * 0.1)
                } else {
                    1.0
                }
            };
            let emb: Vec<f32> = (0..v)
                .flat_map(|t| {
                    let c = (t * 13) % 150;
                    let noise: Vec<f32> = (0..dim).map(|_| 0.5 * normal(&mut s)).collect();
                    (0..dim)
                        .map(|i| (centres[c * dim + i] + noise[i]) * scale((i * 7) % dim))
                        .collect::<Vec<_>>()
                })
                .collect();
            let e = normalised_rows(&emb, dim).unwrap();
            let mut single = vec![false; v];
            single[100] = true;
            for th in [0.75f32, 0.3, -2.0] {
                let flat = |p: Vec<Vec<(u32, u32)>>| {
                    let mut f: Vec<(u32, u32)> = p.into_iter().flatten().collect();
                    f.sort_unstable();
                    f
                };
                let a = flat(similar_pairs(&e, v, dim, th, &single).unwrap());
                let b = flat(similar_pairs_gemm(&e, v, dim, th, &single).unwrap());
                let dot = |i: u32, j: u32| -> f32 {
                    (0..dim)
                        .map(|k| e[i as usize * dim + k] * e[j as usize * dim + k])
                        .sum()
                };
                let only = |x: &[(u32, u32)], y: &[(u32, u32)]| -> Vec<(u32, u32)> {
                    x.iter()
                        .filter(|p| y.binary_search(p).is_err())
                        .copied()
                        .collect()
                };
                for (i, j) in only(&a, &b).into_iter().chain(only(&b, &a)) {
                    assert!(
                        (dot(i, j) - th).abs() < 1e-5,
                        "dim {dim} th {th}: ({i}, {j})"
                    );
                }
                assert!(a.iter().all(|&(i, j)| i < j && i != 100 && j != 100));
                if th < -1.0 {
                    assert_eq!(a.len(), (v - 1) * (v - 2) / 2);
                } else {
                    assert!(a.len() > 500, "dim {dim} th {th}: {}", a.len());
                }
            }
        }
    }

    #[test]
    fn from_embeddings_errors_name_the_argument() {
        let e = |emb: &[f32], th, s: &[u32]| {
            AcousticGroups::from_embeddings(emb, 2, th, s)
                .unwrap_err()
                .arg
        };
        assert_eq!(e(&[1.0, 0.0, 0.0, 0.0], 0.5, &[]), "emb");
        assert_eq!(e(&[1.0, 0.0, f32::NAN, 0.0], 0.5, &[]), "emb");
        assert_eq!(e(&[1.0, 0.0, 0.0], 0.5, &[]), "emb");
        assert_eq!(e(&[1.0, 0.0, 0.0, 1.0], f32::NAN, &[]), "threshold");
        assert_eq!(e(&[1.0, 0.0, 0.0, 1.0], 0.5, &[2]), "singletons");
        let g =
            AcousticGroups::from_embeddings(&[1.0, 0.0, 2.0, 0.1, 0.0, 1.0], 2, 0.9, &[]).unwrap();
        assert_eq!(g.members(0), &[0, 1]);
        assert_eq!(g.members(2), &[2]);
    }

    fn singleton_groups(v: usize) -> AcousticGroups {
        AcousticGroups::from_members((0..v as u32).map(|t| vec![t]).collect(), v).unwrap()
    }

    #[test]
    fn singletons_reproduce_verify_chain_bit_for_bit() {
        let v = 9;
        let groups = singleton_groups(v);
        let mut s = 11u64;
        let params = [
            SamplingParams::new(1.0, 0, 1.0).unwrap(),
            SamplingParams::new(0.7, 4, 1.0).unwrap(),
            SamplingParams::new(1.3, 0, 0.8).unwrap(),
            SamplingParams::new(0.9, 6, 0.9).unwrap(),
            SamplingParams::greedy(),
        ];
        let mut accepted = 0;
        let mut rejected = 0;
        for trial in 0..3000 {
            let k = trial % 4;
            let logits: Vec<f32> = (0..(k + 1) * v)
                .map(|i| {
                    if i % 5 == 3 && trial % 3 == 0 {
                        f32::NEG_INFINITY
                    } else {
                        2.0 * normal(&mut s)
                    }
                })
                .collect();
            let logits = {
                let mut l = logits;
                for r in 0..=k {
                    l[r * v] = 0.5; // every row keeps a finite entry
                }
                l
            };
            let q: Vec<f32> = (0..k)
                .flat_map(|_| random_probs(&mut s, v, trial % 2 == 0))
                .collect();
            let drafts: Vec<i32> = (0..k).map(|_| (lcg(&mut s) * v as f64) as i32).collect();
            let p = params[trial % params.len()];
            let mut g1 = Generator::new(trial as u64, 3);
            let mut g2 = g1;
            let a = verify_chain(&logits, v, &drafts, Some(&q), &p, &mut g1).unwrap();
            let (b, gids) =
                verify_chain_coarse(&groups, &logits, &drafts, &q, &p, &mut g2).unwrap();
            assert_eq!(a, b, "trial {trial}");
            assert_eq!(g1, g2);
            let toks: Vec<i32> = b.tokens.clone();
            assert_eq!(gids, toks, "singleton group id == token id");
            if b.num_accepted() == k {
                accepted += 1;
            } else {
                rejected += 1;
            }
        }
        assert!(accepted > 300 && rejected > 300, "{accepted} {rejected}");
    }

    fn ln_row(p: &[f64]) -> Vec<f32> {
        p.iter()
            .map(|&x| {
                if x > 0.0 {
                    x.ln() as f32
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect()
    }

    /// Per-position emitted-group counts of `n` coarse chains of 2 drafts drawn from `q`
    /// (position 1 counted when the first draft was accepted), and the acceptances.
    fn coarse_position_counts(
        groups: &AcousticGroups,
        logits: &[f32],
        q: &[f32],
        n: usize,
    ) -> ([Vec<usize>; 2], usize) {
        let v = groups.vocab_size();
        let params = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut gen = Generator::new(42, 0);
        let draft_rng = Generator::new(43, 0);
        let mut counts = [
            vec![0usize; groups.num_groups()],
            vec![0usize; groups.num_groups()],
        ];
        let mut acc = 0;
        for i in 0..n {
            let ds = StepRng::new(draft_rng.seed, draft_rng.stream, i as u64);
            let drafts: Vec<i32> = (0..2)
                .map(|j| {
                    let row = &q[j * v..(j + 1) * v];
                    let w: Vec<f64> = row.iter().map(|&x| x as f64).collect();
                    let toks: Vec<u32> = (0..v as u32).collect();
                    sample_weights(&toks, &w, ds.uniform(j as u32, 0)) as i32
                })
                .collect();
            let (r, gids) =
                verify_chain_coarse(groups, logits, &drafts, q, &params, &mut gen).unwrap();
            assert_eq!(gids.len(), r.tokens.len());
            for (&t, &g) in r.tokens.iter().zip(&gids) {
                assert!(groups.members(g as usize).contains(&(t as u32)));
            }
            for (pos, &g) in gids.iter().take(2).enumerate() {
                counts[pos][g as usize] += 1;
            }
            acc += (r.num_accepted() > 0) as usize;
        }
        assert_eq!(gen.step, n as u64);
        (counts, acc)
    }

    #[test]
    fn emitted_group_follows_target_coarse_law() {
        // Overlapping groups; drafts drawn from q; the group emitted at position j follows
        // P_c of row j (position 1: given the first draft was accepted).
        use crate::testlaw::law_ok;
        let v = 6;
        let groups = AcousticGroups::from_members(
            vec![
                vec![0, 1],
                vec![1, 2, 3],
                vec![3],
                vec![3, 4],
                vec![4, 5, 0],
                vec![2, 5],
            ],
            v,
        )
        .unwrap();
        let p = [
            [0.05f64, 0.3, 0.1, 0.25, 0.0, 0.3],
            [0.2, 0.2, 0.2, 0.2, 0.1, 0.1],
            [0.1, 0.1, 0.1, 0.1, 0.3, 0.3],
        ];
        let q = [
            0.4f32, 0.05, 0.05, 0.1, 0.3, 0.1, // row 0: far from p0
            0.1, 0.2, 0.3, 0.1, 0.2, 0.1,
        ];
        let law = |row: &[f64]| {
            let mut out = vec![0.0f64; groups.num_groups()];
            groups.coarse(row, &mut out).unwrap();
            out
        };
        let (law0, law1) = (law(&p[0]), law(&p[1]));
        let logits: Vec<f32> = p.iter().flat_map(|r| ln_row(r)).collect();
        let n = 200_000;
        let ([c0, c1], acc) = coarse_position_counts(&groups, &logits, &q, n);
        assert!(acc > n / 4, "{acc}");
        assert!(law_ok(&c0, &law0), "position 0: {c0:?} vs {law0:?}");
        assert!(law_ok(&c1, &law1), "position 1: {c1:?} vs {law1:?}");
        // Broken on purpose, each caught by the same checks: a verifier reading row 2 for
        // position 1 (position 0 intact), and one taking the draft law q as the target.
        let wrong_row: Vec<f32> = [p[0], p[2], p[2]].iter().flat_map(|r| ln_row(r)).collect();
        let ([b0, b1], _) = coarse_position_counts(&groups, &wrong_row, &q, n);
        assert!(law_ok(&b0, &law0) && !law_ok(&b1, &law1), "{b0:?} {b1:?}");
        let q0: Vec<f64> = q[..v].iter().map(|&x| x as f64).collect();
        let draft_as_target: Vec<f32> = [q0.as_slice(), &p[1], &p[2]]
            .iter()
            .flat_map(|r| ln_row(r))
            .collect();
        let ([a0, _], _) = coarse_position_counts(&groups, &draft_as_target, &q, n);
        assert!(!law_ok(&a0, &law0), "{a0:?}");
    }

    /// Random overlapping groups over `v` tokens: group k = {k} plus a few random tokens.
    fn random_groups(v: usize, s: &mut u64) -> AcousticGroups {
        let members = (0..v as u32)
            .map(|k| {
                let mut m = vec![k];
                for _ in 0..(lcg(s) * 4.0) as usize {
                    m.push((lcg(s) * v as f64) as u32);
                }
                m.sort_unstable();
                m.dedup();
                m
            })
            .collect();
        AcousticGroups::from_members(members, v).unwrap()
    }

    #[test]
    fn sparse_residual_path_matches_law() {
        // top-k keeps p's support small, so rejections take the sorted touched-groups path.
        let v = 200;
        let mut s = 21u64;
        let groups = random_groups(v, &mut s);
        let logits: Vec<f32> = (0..3 * v).map(|_| normal(&mut s)).collect();
        let params = SamplingParams::new(1.0, 4, 1.0).unwrap();
        let mut p = Dist::default();
        warp_row(&logits[..v], &params, &mut Scratch::default(), &mut p);
        let mut touched = Vec::new();
        groups.touched_groups(&p, &mut touched);
        assert!(touched.len() < v / 2, "sparse path");
        let want: Vec<u32> = (0..v as u32)
            .filter(|&k| groups.mass_p(k as usize, &p) > 0.0)
            .collect();
        assert_eq!(touched, want);
        let mut law = vec![0.0f64; v];
        let dense: Vec<f64> = (0..v as u32).map(|t| p.prob(t)).collect();
        groups.coarse(&dense, &mut law).unwrap();
        // Draft law: uniform over 10 tokens, two of them in p's top-4.
        let mut q = vec![0.0f32; 2 * v];
        let top: Vec<u32> = p.tokens.clone();
        let picks: Vec<usize> = (0..8)
            .map(|i| (i * 37 + 5) % v)
            .chain(top[..2].iter().map(|&t| t as usize))
            .collect();
        for row in 0..2 {
            for &t in &picks {
                q[row * v + t] = 0.1;
            }
        }
        let n = 100_000;
        let first_groups = |logits: &[f32]| -> Vec<usize> {
            let mut gen = Generator::new(5, 1);
            let mut counts = vec![0usize; v];
            for i in 0..n {
                let ds = StepRng::new(77, 0, i as u64);
                let d: Vec<i32> = (0..2)
                    .map(|j| picks[pick(ds.uniform(j, 0), picks.len())] as i32)
                    .collect();
                let (r, gids) =
                    verify_chain_coarse(&groups, logits, &d, &q, &params, &mut gen).unwrap();
                for (&t, &g) in r.tokens.iter().zip(&gids) {
                    assert!(groups.members(g as usize).contains(&(t as u32)));
                }
                counts[gids[0] as usize] += 1;
            }
            counts
        };
        use crate::testlaw::law_ok;
        assert!(law_ok(&first_groups(&logits), &law));
        // Broken on purpose: a verifier reading row 1 for the first position is caught.
        let mut swapped = logits.clone();
        for t in 0..v {
            swapped.swap(t, v + t);
        }
        assert!(!law_ok(&first_groups(&swapped), &law));
    }

    #[test]
    fn greedy_accepts_shared_groups_without_drawing() {
        let groups =
            AcousticGroups::from_members(vec![vec![0, 1], vec![1, 2], vec![3], vec![2, 3]], 4)
                .unwrap();
        let v = 4;
        let mut logits = vec![0.0f32; 3 * v];
        logits[1] = 5.0; // row 0 argmax 1
        logits[v + 3] = 5.0; // row 1 argmax 3
        logits[2 * v] = 5.0; // row 2 argmax 0
        let q = vec![0.25f32; 2 * v];
        let mut g = Generator::new(0, 0);
        let p = SamplingParams::greedy();
        // draft 0 = 2 shares group 1 with 1; draft 1 = 2 shares group 3 with 3; bonus 0.
        let (r, gids) = verify_chain_coarse(&groups, &logits, &[2, 2], &q, &p, &mut g).unwrap();
        assert_eq!(r.tokens, vec![2, 2, 0]);
        assert_eq!(r.nodes, vec![1, 2]);
        assert_eq!(gids, vec![1, 3, 0]);
        // draft 0 = 0 shares group 0 with 1; draft 1 = 0 shares nothing with 3: emit 3.
        let (r, gids) = verify_chain_coarse(&groups, &logits, &[0, 0], &q, &p, &mut g).unwrap();
        assert_eq!(r.tokens, vec![0, 3]);
        assert_eq!(gids, vec![0, 2]);
        assert_eq!(g.step, 0);
    }

    #[test]
    fn coarse_verify_validates_inputs() {
        let groups = singleton_groups(3);
        let p = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut g = Generator::new(0, 0);
        let l = vec![0.0f32; 6];
        let q = vec![1.0f32 / 3.0; 3];
        let e = |l: &[f32], d: &[i32], q: &[f32], g: &mut Generator| {
            verify_chain_coarse(&groups, l, d, q, &p, g)
                .unwrap_err()
                .arg
        };
        assert_eq!(e(&l[..5], &[0], &q, &mut g), "target_logits");
        assert_eq!(e(&[f32::NAN; 6], &[0], &q, &mut g), "target_logits");
        assert_eq!(e(&l, &[3], &q, &mut g), "draft_tokens");
        assert_eq!(e(&l, &[0], &q[..2], &mut g), "draft_probs");
        assert_eq!(e(&l, &[0], &[0.5, 0.5, 0.5], &mut g), "draft_probs");
        assert_eq!(e(&l, &[0], &[1.5, -0.5, 0.0], &mut g), "draft_probs");
        assert_eq!(g.step, 0, "failed calls draw nothing");
    }

    #[test]
    fn zero_q_group_is_rejected_and_stays_in_range() {
        let groups =
            AcousticGroups::from_members(vec![vec![0, 1], vec![1, 2], vec![2]], 3).unwrap();
        let logits = vec![0.0f32; 6];
        let q = [1.0f32, 0.0, 0.0];
        let params = SamplingParams::new(1.0, 2, 1.0).unwrap();
        let mut g = Generator::new(9, 0);
        for _ in 0..2000 {
            // Token 2's only group (2) has no draft mass; group 1 has none either.
            let (r, gids) =
                verify_chain_coarse(&groups, &logits, &[2], &q, &params, &mut g).unwrap();
            assert_eq!(r.num_accepted(), 0);
            assert!(groups
                .members(gids[0] as usize)
                .contains(&(r.tokens[0] as u32)));
            assert!(r.tokens[0] >= 0 && r.tokens[0] < 3);
        }
    }

    /// V = 65,536, D = 256 in release mode:
    /// `cargo test -p codecspec-core --release -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn from_embeddings_timing_65536() {
        let (v, dim) = (65_536, 256);
        let mut s = 1u64;
        let centres: Vec<f32> = (0..20_000 * dim).map(|_| normal(&mut s)).collect();
        let emb: Vec<f32> = (0..v)
            .flat_map(|t| {
                let c = (t * 7919) % 20_000;
                let sc = 0.3 + 0.6 * lcg(&mut s) as f32;
                let noise: Vec<f32> = (0..dim).map(|_| sc * normal(&mut s)).collect();
                (0..dim)
                    .map(|i| centres[c * dim + i] / 16.0 + noise[i] / 16.0)
                    .collect::<Vec<_>>()
            })
            .collect();
        // Process CPU seconds (Linux): wall time on a shared machine also counts others' load.
        let cpu = || -> f64 {
            std::fs::read_to_string("/proc/self/stat")
                .ok()
                .and_then(|s| {
                    let f: Vec<f64> = s
                        .rsplit(')')
                        .next()?
                        .split_whitespace()
                        .skip(11)
                        .take(2)
                        .filter_map(|x| x.parse().ok())
                        .collect();
                    (f.len() == 2).then(|| (f[0] + f[1]) / 100.0)
                })
                .unwrap_or(f64::NAN)
        };
        let (t0, c0) = (std::time::Instant::now(), cpu());
        let g = AcousticGroups::from_embeddings(&emb, dim, 0.6, &[]).unwrap();
        let (dt, dc) = (t0.elapsed().as_secs_f64(), cpu() - c0);
        println!(
            "from_embeddings V={v} D={dim}: {dt:.2} s wall, {dc:.2} s CPU on {} threads; \
             nnz {} (mean group {:.2})",
            rayon::current_num_threads(),
            g.nnz(),
            g.nnz() as f64 / v as f64
        );
    }
}
