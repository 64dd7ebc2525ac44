//! Coarse-grained acceptance in a top-k draft tree (docs/design.md §2, this library's extension of
//! PCG).
//!
//! The exact rule for deterministic (top-k) children is "sample y ~ p at the node; descend into
//! the child whose token is y, else emit y". Its coarse analogue: sample a group G ~ P_c at the
//! node; descend into the lowest-rank child whose token belongs to G (that child's token is G's
//! representative), else emit a token drawn from p·w[G, ·] inside G. The emitted group at every
//! position then follows the target's coarse law P_c of that position's row given the emitted
//! prefix, as in [`crate::groups::verify_chain_coarse`].
//!
//! G is drawn sequentially, one test per child in rank order, so that no group is ever drawn
//! unless it is needed and singleton groups consume exactly the exact verifier's draws. With the
//! residual R = P_c at first, child x (a point-mass draft, tested at group level) is accepted iff
//! u <= R(groups(x)) (u = the draw ACCEPT + rank); its group is then G ~ R restricted to
//! groups(x) (draw GROUP). On rejection R <- norm(R with groups(x) zeroed). If every child is
//! rejected, G ~ R (draw EMIT) and a token of G ~ p·w[G, ·] (draw MEMBER). A leaf emits its
//! bonus token y ~ p (EMIT) and a group ~ w[·, y] (GROUP), exact at the token level too.
//!
//! Testing each child as a PCG point-mass draft instead (group k ~ w[·, x], accept with
//! min(1, R(k) / w[k, x]), residual norm(max(R − w[·, x], 0))) is group-exact too, but accepts x
//! with Σ_k min(R(k), w[k, x]) <= R(groups(x)): the same when every R(k) <= w[k, x], less when
//! the target concentrates on a group of x (e.g. R(k) ≈ 1 with x in two groups: 1/2 instead of 1).
//!
//! Every group is a singleton ⇒ R is p_res, each test is u <= p_res(x), the residual update
//! zeroes x and renormalises, and the same floating-point operations run in the same order as in
//! [`crate::verify::verify_tree`] with `DraftKind::TopK`: the results agree bit for bit.

use crate::error::{ensure, Result};
use crate::groups::AcousticGroups;
use crate::rng::{slot, Generator, StepRng};
use crate::tree::Tree;
use crate::verify::{DraftKind, TreeProblem, Verified};
use crate::warp::{argmax, normalise, sample_weights, warp_row, Dist, SamplingParams, Scratch};

/// Which groups judge the children of each tree row.
#[derive(Clone, Copy, Debug)]
pub enum RowGroups<'a> {
    /// The same groups for every row.
    Shared(&'a AcousticGroups),
    /// Row i's groups (e.g. per RVQ level); one entry per tree node.
    PerRow(&'a [&'a AcousticGroups]),
}

impl<'a> RowGroups<'a> {
    #[inline]
    pub fn get(&self, row: usize) -> &'a AcousticGroups {
        match *self {
            RowGroups::Shared(g) => g,
            RowGroups::PerRow(gs) => gs[row],
        }
    }

    /// One entry per row and every vocabulary equal to the target's.
    pub fn validate(&self, rows: usize, vocab: usize) -> Result<()> {
        match *self {
            RowGroups::Shared(g) => ensure(g.vocab_size() == vocab, "groups", || {
                format!(
                    "vocab_size is {}, but target_logits has V = {vocab}",
                    g.vocab_size()
                )
            }),
            RowGroups::PerRow(gs) => {
                ensure(gs.len() == rows, "groups", || {
                    format!(
                        "expected one AcousticGroups or a list of T = {rows} of them (one per \
                         tree row), got a list of {}",
                        gs.len()
                    )
                })?;
                for (i, g) in gs.iter().enumerate() {
                    ensure(g.vocab_size() == vocab, "groups", || {
                        format!(
                            "entry {i} has vocab_size {}, but target_logits has V = {vocab}",
                            g.vocab_size()
                        )
                    })?;
                }
                Ok(())
            }
        }
    }
}

/// Coarse-grained verification of a top-k (deterministic children) draft tree.
///
/// `node_tokens` [T] (node 0 = the root), `target_logits` [T, V] (row i = target law of the
/// token after node i), `groups` for each row. Returns the verified tokens/nodes as
/// [`crate::verify::verify_tree`] does and the group id (in the row's groups) of every emitted
/// token. Siblings must carry distinct tokens. Advances `rng` by one step unless greedy.
///
/// Greedy (temperature 0) draws nothing: with a = argmax of the row, the walk descends into the
/// lowest-rank child sharing a group with a (emitted with the lowest shared group); otherwise a
/// is emitted with its lowest group. With singleton groups this is greedy `verify_tree`.
pub fn verify_tree_coarse(
    groups: RowGroups,
    tree: &Tree,
    node_tokens: &[i32],
    target_logits: &[f32],
    vocab: usize,
    params: &SamplingParams,
    rng: &mut Generator,
) -> Result<(Verified, Vec<i32>)> {
    let prob = TreeProblem {
        tree,
        node_tokens,
        target_logits,
        draft_probs: None,
        vocab,
        kind: DraftKind::TopK,
    };
    prob.validate()?;
    groups.validate(tree.num_nodes(), vocab)?;
    ensure(
        (0..tree.num_nodes()).all(|i| groups.get(i).num_groups() <= i32::MAX as usize),
        "groups",
        || format!("at most {} groups per row", i32::MAX),
    )?;
    if params.is_greedy() {
        return Ok(walk_greedy(&groups, &prob));
    }
    let step = rng.next_step();
    Ok(walk_sampled(&groups, &prob, params, &step))
}

fn walk_greedy(groups: &RowGroups, prob: &TreeProblem) -> (Verified, Vec<i32>) {
    let v = prob.vocab;
    let mut out = Verified::default();
    let mut gids = Vec::new();
    let mut cur = 0usize;
    loop {
        let grp = groups.get(cur);
        let a = argmax(&prob.target_logits[cur * v..(cur + 1) * v]) as usize;
        let hit = prob.tree.children(cur).find_map(|c| {
            grp.common_group(prob.node_tokens[c] as usize, a)
                .map(|g| (c, g))
        });
        match hit {
            Some((c, g)) => {
                out.tokens.push(prob.node_tokens[c]);
                out.nodes.push(c as i32);
                gids.push(g as i32);
                cur = c;
            }
            None => {
                out.tokens.push(a as i32);
                gids.push(grp.groups_of(a)[0] as i32);
                return (out, gids);
            }
        }
    }
}

/// R(k) for group k: `res` is indexed like the ascending `touched` list; other groups have
/// no target mass.
#[inline]
fn residual_at(touched: &[u32], res: &[f64], k: u32) -> f64 {
    touched.binary_search(&k).map_or(0.0, |i| res[i])
}

fn walk_sampled(
    groups: &RowGroups,
    prob: &TreeProblem,
    params: &SamplingParams,
    step: &StepRng,
) -> (Verified, Vec<i32>) {
    let v = prob.vocab;
    let mut scratch = Scratch::default();
    let mut p = Dist::default();
    let (mut touched, mut res, mut tmp, mut w) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut out = Verified::default();
    let mut gids = Vec::new();
    let mut cur = 0usize;
    'walk: loop {
        let grp = groups.get(cur);
        let node = cur as u32;
        warp_row(
            &prob.target_logits[cur * v..(cur + 1) * v],
            params,
            &mut scratch,
            &mut p,
        );
        let kids = prob.tree.children(cur);
        if kids.is_empty() {
            let y = p.sample(step.uniform(node, slot::EMIT));
            out.tokens.push(y as i32);
            gids.push(grp.draw_group(y as usize, step.uniform(node, slot::GROUP)) as i32);
            return (out, gids);
        }
        // R stays P_c (read group by group, cheap) until the first rejection; only then is the
        // whole vector over the groups touching p's support built. The values are the same
        // either way, so the laziness cannot change a result.
        let mut built = false;
        for (rank, c) in kids.enumerate() {
            let x = prob.node_tokens[c] as usize;
            let gx = grp.groups_of(x);
            let r_of = |k: u32, touched: &[u32], res: &[f64]| {
                if built {
                    residual_at(touched, res, k)
                } else {
                    grp.mass_p(k as usize, &p)
                }
            };
            // Pr[G contains x | G ~ R]: the residual mass of the groups x can represent.
            let a = gx.iter().fold(0.0, |acc, &k| acc + r_of(k, &touched, &res));
            let u = step.uniform(node, slot::ACCEPT + rank as u32);
            if u <= a {
                w.clear();
                w.extend(gx.iter().map(|&k| r_of(k, &touched, &res)));
                let g = sample_weights(gx, &w, step.uniform(node, slot::GROUP));
                out.tokens.push(x as i32);
                out.nodes.push(c as i32);
                gids.push(g as i32);
                cur = c;
                continue 'walk;
            }
            if !built {
                grp.touched_groups(&p, &mut touched);
                res.clear();
                res.extend(touched.iter().map(|&k| grp.mass_p(k as usize, &p)));
                built = true;
            }
            // R <- R conditioned on G not containing x. An all-zero result can only come from
            // rounding (then a >= 1 >= u); R is kept as it was, as the exact verifier does.
            tmp.clear();
            tmp.extend_from_slice(&res);
            for &k in gx {
                if let Ok(i) = touched.binary_search(&k) {
                    tmp[i] = 0.0;
                }
            }
            if tmp.iter().any(|&r| r > 0.0) {
                res.copy_from_slice(&tmp);
                normalise(&mut res);
            }
        }
        let g = sample_weights(&touched, &res, step.uniform(node, slot::EMIT));
        let mem = grp.members(g as usize);
        w.clear();
        w.extend(mem.iter().map(|&t| grp.weight(t as usize) * p.prob(t)));
        let y = sample_weights(mem, &w, step.uniform(node, slot::MEMBER));
        out.tokens.push(y as i32);
        gids.push(g as i32);
        return (out, gids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::verify_tree;

    fn lcg(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn below(state: &mut u64, n: usize) -> usize {
        ((lcg(state) * n as f64) as usize).min(n - 1)
    }

    fn normal(state: &mut u64) -> f32 {
        let (a, b) = (lcg(state), lcg(state));
        ((-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()) as f32
    }

    fn singleton_groups(v: usize) -> AcousticGroups {
        AcousticGroups::from_members((0..v as u32).map(|t| vec![t]).collect(), v).unwrap()
    }

    /// Random overlapping groups: group k = {k} plus up to three random tokens.
    fn random_groups(v: usize, s: &mut u64) -> AcousticGroups {
        let members = (0..v as u32)
            .map(|k| {
                let mut m = vec![k];
                for _ in 0..below(s, 4) {
                    m.push(below(s, v) as u32);
                }
                m.sort_unstable();
                m.dedup();
                m
            })
            .collect();
        AcousticGroups::from_members(members, v).unwrap()
    }

    /// A random ancestor- and rank-closed tree of up to `n` nodes besides the root.
    fn random_tree(s: &mut u64, n: usize) -> Tree {
        let mut paths: Vec<Vec<u32>> = Vec::new();
        let mut open: Vec<(Vec<u32>, u32)> = vec![(Vec::new(), 0)];
        while paths.len() < n {
            let cands: Vec<usize> = (0..open.len())
                .filter(|&i| open[i].0.len() < 4 && open[i].1 < 3)
                .collect();
            if cands.is_empty() {
                break;
            }
            let i = cands[below(s, cands.len())];
            let mut child = open[i].0.clone();
            child.push(open[i].1);
            open[i].1 += 1;
            paths.push(child.clone());
            open.push((child, 0));
        }
        Tree::from_paths(paths).unwrap()
    }

    /// Node tokens with distinct siblings.
    fn random_tokens(s: &mut u64, tree: &Tree, v: usize) -> Vec<i32> {
        let mut tok = vec![below(s, v) as i32; tree.num_nodes()];
        for i in 0..tree.num_nodes() {
            let mut pool: Vec<i32> = (0..v as i32).collect();
            for c in tree.children(i) {
                let j = below(s, pool.len());
                tok[c] = pool.swap_remove(j);
            }
        }
        tok
    }

    fn random_logits(s: &mut u64, rows: usize, v: usize, ninf: bool) -> Vec<f32> {
        let mut l: Vec<f32> = (0..rows * v)
            .map(|_| {
                if ninf && lcg(s) < 0.2 {
                    f32::NEG_INFINITY
                } else {
                    2.0 * normal(s)
                }
            })
            .collect();
        for r in 0..rows {
            l[r * v + below(s, v)] = 0.5; // every row keeps a finite entry
        }
        l
    }

    fn params_list() -> Vec<SamplingParams> {
        vec![
            SamplingParams::new(1.0, 0, 1.0).unwrap(),
            SamplingParams::new(0.7, 4, 1.0).unwrap(),
            SamplingParams::new(1.3, 0, 0.8).unwrap(),
            SamplingParams::new(0.9, 6, 0.9).unwrap(),
            SamplingParams::new(0.3, 0, 1.0).unwrap(),
            SamplingParams::greedy(),
        ]
    }

    #[test]
    fn singletons_reproduce_topk_verify_tree_bit_for_bit() {
        let mut s = 5u64;
        let params = params_list();
        let (mut deep, mut stopped) = (0, 0);
        for trial in 0..4000 {
            let v = [5, 9, 40, 300][trial % 4];
            let n = 1 + below(&mut s, 12);
            let tree = random_tree(&mut s, n);
            let t = tree.num_nodes();
            let tok = random_tokens(&mut s, &tree, v);
            let mut logits = random_logits(&mut s, t, v, trial % 3 == 0);
            for i in 0..t {
                // favour the rank-0 child so that deep paths are accepted too
                if let Some(c) = tree.children(i).next() {
                    logits[i * v + tok[c] as usize] = 3.0;
                }
            }
            let p = params[trial % params.len()];
            let single = singleton_groups(v);
            let per_row: Vec<&AcousticGroups> = vec![&single; t];
            let prob = TreeProblem {
                tree: &tree,
                node_tokens: &tok,
                target_logits: &logits,
                draft_probs: None,
                vocab: v,
                kind: DraftKind::TopK,
            };
            let mut g0 = Generator::new(trial as u64, 7);
            let (mut g1, mut g2) = (g0, g0);
            let want = verify_tree(&prob, &p, &mut g0).unwrap();
            let (a, ga) = verify_tree_coarse(
                RowGroups::Shared(&single),
                &tree,
                &tok,
                &logits,
                v,
                &p,
                &mut g1,
            )
            .unwrap();
            let (b, gb) = verify_tree_coarse(
                RowGroups::PerRow(&per_row),
                &tree,
                &tok,
                &logits,
                v,
                &p,
                &mut g2,
            )
            .unwrap();
            assert_eq!(a, want, "trial {trial}");
            assert_eq!(b, want, "trial {trial}");
            assert_eq!(ga, want.tokens, "singleton group id == token id");
            assert_eq!(gb, want.tokens);
            assert_eq!((g0, g1), (g2, g2));
            deep += (want.num_accepted() >= 2) as usize;
            stopped += (want.num_accepted() < tree.max_depth()) as usize;
        }
        assert!(deep > 300 && stopped > 1000, "{deep} {stopped}");
    }

    #[test]
    fn random_overlapping_groups_keep_the_invariants() {
        let mut s = 9u64;
        let params = params_list();
        for trial in 0..3000 {
            let v = [6, 30, 200][trial % 3];
            let n = 1 + below(&mut s, 12);
            let tree = random_tree(&mut s, n);
            let t = tree.num_nodes();
            let tok = random_tokens(&mut s, &tree, v);
            let logits = random_logits(&mut s, t, v, trial % 2 == 0);
            let own: Vec<AcousticGroups> = (0..t).map(|_| random_groups(v, &mut s)).collect();
            let rows: Vec<&AcousticGroups> = own.iter().collect();
            let p = params[trial % params.len()];
            let mut g = Generator::new(trial as u64, 0);
            let (r, gids) = verify_tree_coarse(
                RowGroups::PerRow(&rows),
                &tree,
                &tok,
                &logits,
                v,
                &p,
                &mut g,
            )
            .unwrap();
            assert_eq!(gids.len(), r.num_accepted() + 1);
            assert_eq!(r.tokens.len(), r.num_accepted() + 1);
            let mut cur = 0usize;
            for (j, (&y, &k)) in r.tokens.iter().zip(&gids).enumerate() {
                let grp = rows[cur];
                assert!(
                    grp.members(k as usize).contains(&(y as u32)),
                    "trial {trial}"
                );
                if j < r.num_accepted() {
                    let c = r.nodes[j] as usize;
                    assert_eq!(tree.parents()[c] as usize, cur);
                    assert_eq!(tok[c], y);
                    cur = c;
                } else if !p.is_greedy() {
                    // the emitted group holds none of the rejected children's tokens
                    for c in tree.children(cur) {
                        assert!(!grp.members(k as usize).contains(&(tok[c] as u32)));
                    }
                }
            }
            assert_eq!(g.step, !p.is_greedy() as u64);
        }
    }

    /// Counts of the group emitted at each node (the root's first group, then one per
    /// accepted node: drawn from that node's row) over `n` verifications, and acceptances.
    fn node_group_counts(
        groups: &AcousticGroups,
        tree: &Tree,
        tok: &[i32],
        logits: &[f32],
        n: usize,
    ) -> (Vec<Vec<usize>>, usize) {
        let v = groups.vocab_size();
        let params = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut g = Generator::new(11, 0);
        let mut counts = vec![vec![0usize; groups.num_groups()]; tree.num_nodes()];
        let mut accepted = 0;
        for _ in 0..n {
            let (r, gids) = verify_tree_coarse(
                RowGroups::Shared(groups),
                tree,
                tok,
                logits,
                v,
                &params,
                &mut g,
            )
            .unwrap();
            assert_eq!(gids.len(), r.tokens.len());
            for (&t, &k) in r.tokens.iter().zip(&gids) {
                assert!(groups.members(k as usize).contains(&(t as u32)));
            }
            if r.num_accepted() == 0 {
                // the correction token belongs to no rejected child's group, so is none of them
                assert!(![1, 3, 6].contains(&r.tokens[0]));
            }
            let mut at = 0usize; // the node each emitted group is drawn at
            for (j, &k) in gids.iter().enumerate() {
                counts[at][k as usize] += 1;
                if j < r.num_accepted() {
                    at = r.nodes[j] as usize;
                }
            }
            accepted += (r.num_accepted() > 0) as usize;
        }
        assert_eq!(g.step, n as u64);
        (counts, accepted)
    }

    /// Exact law of the group emitted at every node: P_c of that node's row (given it was
    /// reached); broken verifiers reading the wrong rows must fail the same check.
    #[test]
    fn emitted_groups_follow_each_nodes_coarse_law() {
        use crate::testlaw::law_ok;
        let v = 8;
        let groups = AcousticGroups::from_members(
            vec![
                vec![0, 1],
                vec![1, 2, 3],
                vec![3],
                vec![3, 4, 5],
                vec![5, 6, 0],
                vec![2, 6, 7],
                vec![7],
            ],
            v,
        )
        .unwrap();
        let tree =
            Tree::from_paths(vec![vec![0], vec![1], vec![2], vec![0, 0], vec![1, 0]]).unwrap();
        let mut s = 3u64;
        let logits = random_logits(&mut s, tree.num_nodes(), v, false);
        let params = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let laws: Vec<Vec<f64>> = (0..tree.num_nodes())
            .map(|i| {
                let mut p = Dist::default();
                warp_row(
                    &logits[i * v..(i + 1) * v],
                    &params,
                    &mut Scratch::default(),
                    &mut p,
                );
                let dense: Vec<f64> = (0..v as u32).map(|t| p.prob(t)).collect();
                let mut law = vec![0.0f64; groups.num_groups()];
                groups.coarse(&dense, &mut law).unwrap();
                law
            })
            .collect();
        // Root children 1, 3, 6 (groups overlap), then deeper nodes.
        let tok = [4, 1, 3, 6, 2, 0];
        let n = 200_000;
        let lawful = |counts: &[Vec<usize>]| -> Vec<bool> {
            (0..tree.num_nodes())
                .filter(|&i| counts[i].iter().sum::<usize>() >= 2_000)
                .map(|i| law_ok(&counts[i], &laws[i]))
                .collect()
        };
        let (counts, accepted) = node_group_counts(&groups, &tree, &tok, &logits, n);
        assert!(accepted > n / 2, "{accepted}");
        let ok = lawful(&counts);
        assert!(ok.len() >= 4 && ok.iter().all(|&x| x), "{ok:?} {counts:?}");
        // Broken on purpose: rows 1 and 2 swapped (a verifier reading the wrong node's row
        // past the root: the root's law intact, deeper nodes caught) ...
        let mut swapped = logits.clone();
        for t in 0..v {
            swapped.swap(v + t, 2 * v + t);
        }
        let (bad, _) = node_group_counts(&groups, &tree, &tok, &swapped, n);
        let ok = lawful(&bad);
        assert!(ok[0] && !ok.iter().all(|&x| x), "{ok:?}");
        // ... and the root reading node 1's row.
        let mut root = logits.clone();
        root.copy_within(v..2 * v, 0);
        let (bad, _) = node_group_counts(&groups, &tree, &tok, &root, n);
        assert!(!lawful(&bad)[0]);
    }

    #[test]
    fn per_row_groups_judge_their_own_row() {
        // Row 0 groups {0, 1}: child token 1 stands for argmax 0; row 1 singletons.
        let v = 3;
        let pair = AcousticGroups::from_members(vec![vec![0, 1], vec![2]], v).unwrap();
        let single = singleton_groups(v);
        let tree = Tree::chain(1).unwrap();
        let mut logits = vec![0.0f32; 2 * v];
        logits[0] = 9.0; // row 0 argmax 0
        logits[v + 2] = 9.0; // row 1 argmax 2
        let tok = [2, 1];
        let rows = [&pair, &single];
        let mut g = Generator::new(0, 0);
        let greedy = SamplingParams::greedy();
        let (r, gids) = verify_tree_coarse(
            RowGroups::PerRow(&rows),
            &tree,
            &tok,
            &logits,
            v,
            &greedy,
            &mut g,
        )
        .unwrap();
        assert_eq!((r.tokens, r.nodes, gids), (vec![1, 2], vec![1], vec![0, 2]));
        let rows = [&single, &pair];
        let (r, gids) = verify_tree_coarse(
            RowGroups::PerRow(&rows),
            &tree,
            &tok,
            &logits,
            v,
            &greedy,
            &mut g,
        )
        .unwrap();
        assert_eq!((r.tokens, r.nodes, gids), (vec![0], vec![], vec![0]));
        assert_eq!(g.step, 0, "greedy draws nothing");
        // Sampling, nearly a point mass on 0: the pair row accepts token 1 almost always.
        let p = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let rows = [&pair, &single];
        let mut acc = 0;
        for _ in 0..1000 {
            let (r, _) = verify_tree_coarse(
                RowGroups::PerRow(&rows),
                &tree,
                &tok,
                &logits,
                v,
                &p,
                &mut g,
            )
            .unwrap();
            acc += r.num_accepted();
        }
        assert!(acc > 990, "{acc}");
    }

    #[test]
    fn coarse_tree_validates_inputs() {
        let v = 4;
        let grp = singleton_groups(v);
        let other = singleton_groups(v + 1);
        let tree = Tree::from_paths(vec![vec![0], vec![1]]).unwrap();
        let l = vec![0.0f32; 3 * v];
        let p = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut g = Generator::new(0, 0);
        let mut e = |gr: RowGroups, tok: &[i32], l: &[f32]| {
            verify_tree_coarse(gr, &tree, tok, l, v, &p, &mut g)
                .unwrap_err()
                .arg
        };
        let sh = RowGroups::Shared(&grp);
        assert_eq!(e(sh, &[0, 1, 2], &l[..8]), "target_logits");
        assert_eq!(e(sh, &[0, 1, 2], &[f32::NAN; 12]), "target_logits");
        assert_eq!(e(sh, &[0, 1], &l), "node_tokens");
        assert_eq!(e(sh, &[0, 1, 4], &l), "node_tokens");
        assert_eq!(e(sh, &[0, 1, 1], &l), "node_tokens");
        assert_eq!(e(RowGroups::Shared(&other), &[0, 1, 2], &l), "groups");
        assert_eq!(
            e(RowGroups::PerRow(&[&grp, &grp]), &[0, 1, 2], &l),
            "groups"
        );
        assert_eq!(
            e(RowGroups::PerRow(&[&grp, &other, &grp]), &[0, 1, 2], &l),
            "groups"
        );
        assert_eq!(e(RowGroups::PerRow(&[]), &[0, 1, 2], &l), "groups");
        assert_eq!(g.step, 0, "failed calls draw nothing");
    }
}
