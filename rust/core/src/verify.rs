//! Lossless verification of draft chains and trees.
//!
//! Walk from the root: at each visited node warp the target row into p, then test the node's
//! children in rank order against a residual that starts at p. A child is accepted with
//! probability min(1, p_res(x) / q_i(x)); on rejection p_res <- norm(max(p_res - q_i, 0)).
//! What q_i is depends on how the children were drafted:
//! - point masses (no draft probabilities, or deterministic top-k children): q_i = delta(x_i),
//!   so rejection just zeroes x_i;
//! - i.i.d. draws from q (SpecInfer): q_i = q;
//! - draws without replacement from q (Sequoia): q_i = q with earlier children removed.
//!
//! If no child is accepted one token is drawn from p_res; at a leaf one bonus token from p.
//! The emitted sequence then has exactly the law of sampling autoregressively from p.

use rayon::prelude::*;

use crate::error::{ensure, Error, Result};
use crate::heads::HeadBank;
use crate::rng::{slot, Generator, StepRng};
use crate::tree::Tree;
use crate::warp::{
    argmax, check_logits, normalise, row_check, warp_row, Dist, SamplingParams, Scratch,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraftKind {
    TopK,
    Iid,
    Swor,
}

impl DraftKind {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "topk" => Ok(Self::TopK),
            "iid" => Ok(Self::Iid),
            "swor" => Ok(Self::Swor),
            _ => Err(Error::new(
                "draft_kind",
                format!("must be one of 'topk', 'iid', 'swor', got {s:?}"),
            )),
        }
    }
}

/// One stream's verify problem; all slices are row-major views of the caller's arrays.
#[derive(Clone, Copy)]
pub struct TreeProblem<'a> {
    pub tree: &'a Tree,
    /// [T]; node 0 is the root (the last committed token), also in [0, V).
    pub node_tokens: &'a [i32],
    /// [T, V]
    pub target_logits: &'a [f32],
    /// [T, V]: row i = the law node i's children were drawn from.
    pub draft_probs: Option<&'a [f32]>,
    pub vocab: usize,
    pub kind: DraftKind,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// Accepted draft tokens, then exactly one correction or bonus token.
    pub tokens: Vec<i32>,
    /// Accepted tree nodes (root excluded), in path order.
    pub nodes: Vec<i32>,
}

impl Verified {
    pub fn num_accepted(&self) -> usize {
        self.nodes.len()
    }
}

impl<'a> TreeProblem<'a> {
    pub fn validate(&self) -> Result<()> {
        let (t, v) = (self.tree.num_nodes(), self.vocab);
        ensure(self.target_logits.len() == t * v, "target_logits", || {
            format!(
                "expected shape [{t}, {v}], got {} values",
                self.target_logits.len()
            )
        })?;
        check_logits(self.target_logits, v, "target_logits")?;
        self.validate_structure()
    }

    /// Everything but the target logits: tokens, sibling distinctness, draft probabilities.
    pub fn validate_structure(&self) -> Result<()> {
        let (t, v) = (self.tree.num_nodes(), self.vocab);
        ensure(v > 0, "target_logits", || {
            "vocabulary size must be > 0".into()
        })?;
        ensure(self.node_tokens.len() == t, "node_tokens", || {
            format!(
                "expected {t} entries (one per tree node), got {}",
                self.node_tokens.len()
            )
        })?;
        for (i, &x) in self.node_tokens.iter().enumerate() {
            ensure(x >= 0 && (x as usize) < v, "node_tokens", || {
                format!("node {i} holds token {x}, outside [0, {v})")
            })?;
        }
        if self.kind == DraftKind::TopK {
            self.check_distinct_siblings()?;
        }
        if let Some(q) = self.draft_probs {
            ensure(q.len() == t * v, "draft_probs", || {
                format!("expected shape [{t}, {v}], got {} values", q.len())
            })?;
            for i in 0..t {
                if !self.tree.children(i).is_empty() {
                    check_prob_row(&q[i * v..(i + 1) * v], i, "draft_probs")?;
                }
            }
        }
        Ok(())
    }

    fn check_distinct_siblings(&self) -> Result<()> {
        for i in 0..self.tree.num_nodes() {
            let kids = self.tree.children(i);
            for a in kids.clone() {
                for b in a + 1..kids.end {
                    if self.node_tokens[a] == self.node_tokens[b] {
                        return Err(Error::new(
                            "node_tokens",
                            format!(
                                "siblings {a} and {b} both hold token {} (draft_kind 'topk' needs distinct children)",
                                self.node_tokens[a]
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A draft probability row must be finite, non-negative and sum to 1 (within float error).
pub fn check_prob_row(q: &[f32], row: usize, arg: &'static str) -> Result<()> {
    let mut sum = 0.0f64;
    for &x in q {
        if !(0.0..f32::INFINITY).contains(&x) {
            return Err(Error::new(
                arg,
                format!("row {row} holds {x}: probabilities must be finite and >= 0"),
            ));
        }
        sum += x as f64;
    }
    ensure((sum - 1.0).abs() <= 1e-3, arg, || {
        format!("row {row} sums to {sum}, expected 1")
    })
}

/// The law the current child was drawn from, as the residual update needs it.
struct DraftLaw<'q> {
    row: Option<&'q [f32]>,
    row_sum: f64,
    kind: DraftKind,
    /// Swor: tokens already drafted at this node and the mass they had.
    removed: Vec<u32>,
    removed_mass: f64,
}

impl<'q> DraftLaw<'q> {
    fn new(row: Option<&'q [f32]>, kind: DraftKind) -> Self {
        let row = if kind == DraftKind::TopK { None } else { row };
        let row_sum = row.map_or(1.0, |r| r.iter().map(|&x| x as f64).sum());
        Self {
            row,
            row_sum,
            kind,
            removed: Vec::new(),
            removed_mass: 0.0,
        }
    }

    /// q_i(y) for the child currently being tested, whose token is `x`.
    #[inline]
    fn q(&self, x: u32, y: u32) -> f64 {
        match self.row {
            None => (x == y) as u8 as f64,
            Some(r) => {
                if self.kind == DraftKind::Swor && self.removed.contains(&y) {
                    return 0.0;
                }
                let denom = self.row_sum - self.removed_mass;
                if denom <= 0.0 {
                    0.0
                } else {
                    r[y as usize] as f64 / denom
                }
            }
        }
    }

    fn after_rejecting(&mut self, x: u32) {
        if self.kind == DraftKind::Swor {
            if let Some(r) = self.row {
                if !self.removed.contains(&x) {
                    self.removed.push(x);
                    self.removed_mass += r[x as usize] as f64;
                }
            }
        }
    }
}

/// p_res <- norm(max(p_res - q_i, 0)) on p's support. An all-zero result can only come from
/// rounding (p_res == q_i means nothing is ever rejected); then p_res is kept as it was.
fn subtract_draft(res: &mut Dist, law: &DraftLaw, x: u32, tmp: &mut Vec<f64>) {
    tmp.clear();
    tmp.extend(
        res.tokens
            .iter()
            .zip(&res.probs)
            .map(|(&t, &p)| (p - law.q(x, t)).max(0.0)),
    );
    if tmp.iter().any(|&w| w > 0.0) {
        res.probs.copy_from_slice(tmp);
        normalise(&mut res.probs);
    }
}

#[derive(Default)]
struct Work {
    scratch: Scratch,
    p: Dist,
    tmp: Vec<f64>,
    row: Vec<f32>,
}

/// Where a visited node's target logits come from.
enum Rows<'a> {
    /// Materialised [T, V] logits.
    Dense(&'a [f32]),
    /// Computed on demand: head `heads[i]` applied to `hidden[i]`.
    Lazy(&'a HiddenRows<'a>),
}

impl Rows<'_> {
    /// Row of `node`, validated (no NaN/+inf, a finite entry) when computed lazily.
    fn get<'w>(&'w self, node: usize, vocab: usize, buf: &'w mut Vec<f32>) -> Result<&'w [f32]> {
        match self {
            Rows::Dense(l) => Ok(&l[node * vocab..(node + 1) * vocab]),
            Rows::Lazy(h) => {
                buf.resize(vocab, 0.0);
                h.row_into(node, buf);
                let (m, ok) = row_check(buf);
                ensure(ok && m > f32::NEG_INFINITY, "hidden", || {
                    format!("node {node}'s target logits are not finite")
                })?;
                Ok(buf)
            }
        }
    }
}

/// Verifies one stream. Greedy (temperature 0) draws nothing and leaves `rng` as it was.
pub fn verify_tree(
    prob: &TreeProblem,
    params: &SamplingParams,
    rng: &mut Generator,
) -> Result<Verified> {
    prob.validate()?;
    let step = (!params.is_greedy()).then(|| rng.next_step());
    walk(
        prob,
        &Rows::Dense(prob.target_logits),
        params,
        step.as_ref(),
        0.0,
        &mut Work::default(),
    )
}

/// Inner walk shared by every entry point; `step` is None for greedy verification. `beta` is
/// SSD's tolerance (0 everywhere but `verify_chain_tolerant`): a child is accepted iff
/// u < min(1, p_res(x) / q(x)) + beta, written (u - beta)·q(x) <= p_res(x) so that beta = 0
/// evaluates the exact rule's expression bit for bit.
fn walk(
    prob: &TreeProblem,
    rows: &Rows,
    params: &SamplingParams,
    step: Option<&StepRng>,
    beta: f64,
    w: &mut Work,
) -> Result<Verified> {
    let mut out = Verified::default();
    let mut cur = 0usize;
    'walk: loop {
        let row = rows.get(cur, prob.vocab, &mut w.row)?;
        let Some(step) = step else {
            let y = argmax(row) as i32;
            match prob.tree.children(cur).find(|&c| prob.node_tokens[c] == y) {
                Some(c) => {
                    out.tokens.push(y);
                    out.nodes.push(c as i32);
                    cur = c;
                    continue 'walk;
                }
                None => {
                    out.tokens.push(y);
                    return Ok(out);
                }
            }
        };
        warp_row(row, params, &mut w.scratch, &mut w.p);
        let q_row = prob
            .draft_probs
            .map(|q| &q[cur * prob.vocab..(cur + 1) * prob.vocab]);
        let mut law = DraftLaw::new(q_row, prob.kind);
        for (rank, c) in prob.tree.children(cur).enumerate() {
            let x = prob.node_tokens[c] as u32;
            let (px, qx) = (w.p.prob(x), law.q(x, x));
            let u = step.uniform(cur as u32, slot::ACCEPT + rank as u32);
            // q(x) = 0 means x could not have been drafted: reject rather than divide.
            if qx > 0.0 && (u - beta) * qx <= px {
                out.tokens.push(x as i32);
                out.nodes.push(c as i32);
                cur = c;
                continue 'walk;
            }
            subtract_draft(&mut w.p, &law, x, &mut w.tmp);
            law.after_rejecting(x);
        }
        let y = w.p.sample(step.uniform(cur as u32, slot::EMIT));
        out.tokens.push(y as i32);
        return Ok(out);
    }
}

/// Target rows that are computed only for the nodes the walk visits.
pub struct HiddenRows<'a> {
    /// [T, H] final-norm hidden states of the query nodes.
    pub hidden: &'a [f32],
    /// [T] head per node.
    pub heads: &'a [i64],
    pub bank: &'a HeadBank,
}

impl HiddenRows<'_> {
    fn row_into(&self, node: usize, out: &mut [f32]) {
        let h = self.bank.hidden();
        let z = &self.hidden[node * h..(node + 1) * h];
        self.bank
            .logits_into(self.heads[node] as usize, z, None, out);
    }

    fn validate(&self, t: usize) -> Result<()> {
        let h = self.bank.hidden();
        ensure(self.hidden.len() == t * h, "hidden", || {
            format!(
                "expected shape [{t}, {h}], got {} values",
                self.hidden.len()
            )
        })?;
        ensure(self.hidden.iter().all(|x| x.is_finite()), "hidden", || {
            "contains NaN or inf".into()
        })?;
        ensure(self.heads.len() == t, "node_heads", || {
            format!("expected {t} entries, got {}", self.heads.len())
        })?;
        for &hd in self.heads {
            self.bank.check_head(hd, "node_heads")?;
        }
        Ok(())
    }
}

/// `verify_tree` with target rows computed lazily from hidden states and a head bank.
/// `prob.target_logits` is ignored (pass an empty slice).
pub fn verify_tree_hidden(
    prob: &TreeProblem,
    rows: &HiddenRows,
    params: &SamplingParams,
    rng: &mut Generator,
) -> Result<Verified> {
    let t = prob.tree.num_nodes();
    rows.validate(t)?;
    prob.validate_structure()?;
    let step = (!params.is_greedy()).then(|| rng.next_step());
    walk(
        prob,
        &Rows::Lazy(rows),
        params,
        step.as_ref(),
        0.0,
        &mut Work::default(),
    )
}

/// Verifies B independent streams in parallel. Each stream draws only from its own generator,
/// so stream b's result equals a single-stream call with the same generator state.
pub fn verify_tree_batch(
    problems: &[TreeProblem],
    params: &SamplingParams,
    rngs: &mut [Generator],
) -> Result<Vec<Verified>> {
    ensure(problems.len() == rngs.len(), "generators", || {
        format!(
            "expected {} generators (one per stream), got {}",
            problems.len(),
            rngs.len()
        )
    })?;
    // Steps are taken from copies so that a failed batch leaves every generator untouched.
    let mut next = rngs.to_vec();
    let steps: Vec<Option<StepRng>> = next
        .iter_mut()
        .map(|g| (!params.is_greedy()).then(|| g.next_step()))
        .collect();
    // Validating a stream right before walking it keeps its rows in cache for the walk.
    let results: Vec<Result<Verified>> = problems
        .par_iter()
        .zip(steps.par_iter())
        .map_init(Work::default, |w, (p, s)| {
            p.validate()?;
            walk(p, &Rows::Dense(p.target_logits), params, s.as_ref(), 0.0, w)
        })
        .collect();
    // The first invalid stream in batch order names the error, whatever the thread timing.
    let out = results.into_iter().collect::<Result<Vec<_>>>()?;
    rngs.copy_from_slice(&next);
    Ok(out)
}

/// A chain is the one-child-per-node tree: target row j follows draft j (row K = bonus).
pub fn verify_chain(
    target_logits: &[f32],
    vocab: usize,
    draft_tokens: &[i32],
    draft_probs: Option<&[f32]>,
    params: &SamplingParams,
    rng: &mut Generator,
) -> Result<Verified> {
    verify_chain_tolerant(
        target_logits,
        vocab,
        draft_tokens,
        draft_probs,
        params,
        rng,
        0.0,
    )
}

/// `verify_chain` with SSD's tolerance-relaxed acceptance: draft x is accepted iff
/// u < min(1, p(x) / q(x)) + tolerance (tolerance = SSD's beta, in [0, 1]). On rejection the
/// correction token is drawn from the usual residual norm(max(p - q, 0)) (p when that is all
/// zero), so tolerance = 0 is exactly `verify_chain` (same draws, same result, bit for bit).
///
/// tolerance > 0 is lossy by design: the emitted tokens no longer follow the target law (a
/// draft can even be accepted where the warped target gives it zero probability). A q(x) = 0
/// draft is still always rejected. Greedy (temperature 0) ignores the tolerance.
pub fn verify_chain_tolerant(
    target_logits: &[f32],
    vocab: usize,
    draft_tokens: &[i32],
    draft_probs: Option<&[f32]>,
    params: &SamplingParams,
    rng: &mut Generator,
    tolerance: f64,
) -> Result<Verified> {
    ensure((0.0..=1.0).contains(&tolerance), "tolerance", || {
        format!("must be a number in [0, 1], got {tolerance}")
    })?;
    let k = draft_tokens.len();
    let tree = Tree::chain(k).map_err(|e| Error::new("draft_tokens", e.msg))?;
    ensure(
        target_logits.len() == (k + 1) * vocab,
        "target_logits",
        || {
            format!(
            "expected shape [{}, {vocab}] (one row per draft plus the bonus row), got {} values",
            k + 1,
            target_logits.len()
        )
        },
    )?;
    if let Some(q) = draft_probs {
        ensure(q.len() == k * vocab, "draft_probs", || {
            format!("expected shape [{k}, {vocab}], got {} values", q.len())
        })?;
    }
    for (j, &x) in draft_tokens.iter().enumerate() {
        ensure(x >= 0 && (x as usize) < vocab, "draft_tokens", || {
            format!("draft {j} is token {x}, outside [0, {vocab})")
        })?;
    }
    let mut tokens = Vec::with_capacity(k + 1);
    tokens.push(0);
    tokens.extend_from_slice(draft_tokens);
    // The bonus row has no children, so its draft row is never read: pad with zeros.
    let padded: Option<Vec<f32>> = draft_probs.map(|q| {
        let mut v = q.to_vec();
        v.resize((k + 1) * vocab, 0.0);
        v
    });
    let prob = TreeProblem {
        tree: &tree,
        node_tokens: &tokens,
        target_logits,
        draft_probs: padded.as_deref(),
        vocab,
        kind: DraftKind::Iid,
    };
    prob.validate()?;
    let step = (!params.is_greedy()).then(|| rng.next_step());
    walk(
        &prob,
        &Rows::Dense(prob.target_logits),
        params,
        step.as_ref(),
        tolerance,
        &mut Work::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits_for(p: &[f64]) -> Vec<f32> {
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

    #[test]
    fn greedy_chain_accepts_matching_prefix() {
        let v = 4;
        let mut logits = vec![0.0f32; 3 * v];
        logits[2] = 1.0; // row 0 argmax 2
        logits[v + 3] = 1.0; // row 1 argmax 3
        logits[2 * v + 1] = 1.0; // row 2 argmax 1
        let mut g = Generator::new(0, 0);
        let r = verify_chain(&logits, v, &[2, 0], None, &SamplingParams::greedy(), &mut g).unwrap();
        assert_eq!(r.tokens, vec![2, 3]);
        assert_eq!(r.nodes, vec![1]);
        assert_eq!(g.step, 0);
    }

    /// Per-position token counts of `n` chains with the one draft `[3]` (point-mass draft):
    /// position 0 always, position 1 when the draft was accepted (then drawn from row 1).
    fn chain_position_counts(logits: &[f32], v: usize, n: usize) -> [Vec<usize>; 2] {
        let params = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut g = Generator::new(3, 0);
        let mut counts = [vec![0usize; v], vec![0usize; v]];
        for _ in 0..n {
            let r = verify_chain(logits, v, &[3], None, &params, &mut g).unwrap();
            for (pos, &t) in r.tokens.iter().enumerate() {
                counts[pos][t as usize] += 1;
            }
        }
        counts
    }

    #[test]
    fn chain_law_matches_target() {
        // Every emitted position: token 0 ~ p0; token 1 (after the accepted draft) ~ p1.
        use crate::testlaw::law_ok;
        let v = 5;
        let p0 = [0.1, 0.4, 0.2, 0.3, 0.0];
        let p1 = [0.25, 0.05, 0.25, 0.45, 0.0];
        let mut logits = logits_for(&p0);
        logits.extend(logits_for(&p1));
        let n = 200_000;
        let [c0, c1] = chain_position_counts(&logits, v, n);
        assert!(law_ok(&c0, &p0), "position 0: {c0:?}");
        assert!(
            c1.iter().sum::<usize>() > n / 5,
            "the draft is accepted ~30% of the time"
        );
        assert!(law_ok(&c1, &p1), "position 1: {c1:?}");
        // Broken on purpose, each must fail the same checks: a verifier that draws the
        // bonus from the draft's row (position 0 intact, position 1 wrong), and one that
        // takes the draft's law as the target's (every draft accepted).
        let mut wrong_row = logits_for(&p0);
        wrong_row.extend(logits_for(&p0));
        let [b0, b1] = chain_position_counts(&wrong_row, v, n);
        assert!(law_ok(&b0, &p0) && !law_ok(&b1, &p1), "{b0:?} {b1:?}");
        let mut draft_as_target = logits_for(&[0.0, 0.0, 0.0, 1.0, 0.0]);
        draft_as_target.extend(logits_for(&p1));
        let [a0, _] = chain_position_counts(&draft_as_target, v, n);
        assert!(!law_ok(&a0, &p0), "{a0:?}");
    }

    #[test]
    fn zero_q_draft_is_rejected() {
        let v = 3;
        let logits = vec![0.0f32; 2 * v];
        let q = vec![1.0f32, 0.0, 0.0];
        let params = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut g = Generator::new(1, 0);
        for _ in 0..1000 {
            let r = verify_chain(&logits, v, &[1], Some(&q), &params, &mut g).unwrap();
            assert_eq!(r.nodes.len(), 0);
            assert!(r.tokens[0] >= 0 && (r.tokens[0] as usize) < v);
        }
    }

    fn lcg(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A random chain problem: logits [K+1, V] (some -inf), drafts, draft rows [K, V] or none.
    fn random_chain(s: &mut u64, k: usize, v: usize) -> (Vec<f32>, Vec<i32>, Option<Vec<f32>>) {
        let mut logits: Vec<f32> = (0..(k + 1) * v)
            .map(|_| {
                let x = lcg(s);
                if x < 0.15 {
                    f32::NEG_INFINITY
                } else {
                    (4.0 * lcg(s) - 2.0) as f32
                }
            })
            .collect();
        for r in 0..=k {
            logits[r * v + (r % v)] = 0.25;
        }
        let drafts: Vec<i32> = (0..k).map(|_| (lcg(s) * v as f64) as i32).collect();
        let q = (lcg(s) < 0.7).then(|| {
            (0..k)
                .flat_map(|_| {
                    let mut r: Vec<f64> = (0..v)
                        .map(|_| if lcg(s) < 0.2 { 0.0 } else { lcg(s) })
                        .collect();
                    r[0] += 1e-3;
                    let t: f64 = r.iter().sum();
                    r.into_iter().map(move |x| (x / t) as f32)
                })
                .collect()
        });
        (logits, drafts, q)
    }

    #[test]
    fn zero_tolerance_is_the_exact_chain_bit_for_bit() {
        // The reference is the pre-tolerance implementation: verify_tree on the chain tree.
        let params = [
            SamplingParams::new(1.0, 0, 1.0).unwrap(),
            SamplingParams::new(0.7, 3, 1.0).unwrap(),
            SamplingParams::new(1.2, 0, 0.85).unwrap(),
            SamplingParams::greedy(),
        ];
        let mut s = 17u64;
        let (mut acc, mut rej) = (0, 0);
        for trial in 0..5000 {
            let (k, v) = (trial % 5, 2 + trial % 11);
            let (logits, drafts, q) = random_chain(&mut s, k, v);
            let p = params[trial % params.len()];
            let tree = Tree::chain(k).unwrap();
            let mut tokens = vec![0];
            tokens.extend_from_slice(&drafts);
            let padded = q.as_ref().map(|q| {
                let mut x = q.clone();
                x.resize((k + 1) * v, 0.0);
                x
            });
            let prob = TreeProblem {
                tree: &tree,
                node_tokens: &tokens,
                target_logits: &logits,
                draft_probs: padded.as_deref(),
                vocab: v,
                kind: DraftKind::Iid,
            };
            let mut g0 = Generator::new(trial as u64, 1);
            let (mut g1, mut g2) = (g0, g0);
            let want = verify_tree(&prob, &p, &mut g0).unwrap();
            let a = verify_chain(&logits, v, &drafts, q.as_deref(), &p, &mut g1).unwrap();
            let b =
                verify_chain_tolerant(&logits, v, &drafts, q.as_deref(), &p, &mut g2, 0.0).unwrap();
            assert_eq!(a, want, "trial {trial}");
            assert_eq!(b, want, "trial {trial}");
            assert_eq!((g1, g2), (g0, g0));
            acc += want.num_accepted();
            rej += (want.num_accepted() < k) as usize;
        }
        assert!(acc > 1000 && rej > 1000, "{acc} {rej}");
    }

    #[test]
    fn acceptance_is_monotone_in_tolerance() {
        // Same generator state: a larger beta accepts every draft a smaller one accepted.
        let p = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut s = 23u64;
        let betas = [0.0, 0.05, 0.2, 0.5, 1.0];
        let mut total = [0usize; 5];
        for trial in 0..3000 {
            let (k, v) = (1 + trial % 4, 3 + trial % 7);
            let (logits, drafts, q) = random_chain(&mut s, k, v);
            let g = Generator::new(trial as u64, 2);
            let mut prev: Option<Verified> = None;
            for (i, &b) in betas.iter().enumerate() {
                let mut gi = g;
                let r = verify_chain_tolerant(&logits, v, &drafts, q.as_deref(), &p, &mut gi, b)
                    .unwrap();
                assert_eq!(gi.step, 1);
                assert!(r.tokens.iter().all(|&t| t >= 0 && (t as usize) < v));
                if let Some(pr) = &prev {
                    assert!(r.num_accepted() >= pr.num_accepted());
                    assert_eq!(
                        r.tokens[..pr.num_accepted()],
                        pr.tokens[..pr.num_accepted()]
                    );
                }
                if b == 1.0 {
                    // Everything with q(x) > 0 is accepted.
                    let full = (0..k)
                        .all(|j| q.as_ref().map_or(1.0, |q| q[j * v + drafts[j] as usize]) > 0.0);
                    if full {
                        assert_eq!(r.num_accepted(), k);
                    }
                }
                total[i] += r.num_accepted();
                prev = Some(r);
            }
        }
        assert!(total.windows(2).all(|w| w[0] < w[1]), "{total:?}");
    }

    #[test]
    fn tolerance_is_validated() {
        let v = 3;
        let logits = vec![0.0f32; 2 * v];
        let p = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut g = Generator::new(1, 0);
        for b in [-0.1, 1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let e = verify_chain_tolerant(&logits, v, &[1], None, &p, &mut g, b).unwrap_err();
            assert_eq!(e.arg, "tolerance", "{b}");
        }
        assert_eq!(g.step, 0);
    }

    #[test]
    fn topk_rejects_duplicate_siblings() {
        let tree = Tree::from_paths(vec![vec![0], vec![1]]).unwrap();
        let logits = vec![0.0f32; 3 * 4];
        let prob = TreeProblem {
            tree: &tree,
            node_tokens: &[0, 1, 1],
            target_logits: &logits,
            draft_probs: None,
            vocab: 4,
            kind: DraftKind::TopK,
        };
        let e = verify_tree(&prob, &SamplingParams::greedy(), &mut Generator::new(0, 0));
        assert_eq!(e.unwrap_err().arg, "node_tokens");
    }
}
