//! Sparse draft trees: node 0 is the root (the last committed token); every other node is a
//! rank path (r_1, ..., r_d) = "the r_1-th candidate at depth 1, then its r_2-th child, ...".
//!
//! Canonical node order is (depth, path lexicographically). It gives parents[i] < i, keeps
//! each node's children contiguous and in rank order, and makes from_paths(order-insensitive)
//! and greedy() produce identical layouts for identical trees.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::error::{ensure, Error, Result};

/// Deep enough for any depth loop (Qwen3-TTS has 15 depth positions).
pub const MAX_DEPTH: usize = 32;
pub const MAX_RANK: u32 = u16::MAX as u32;

type Path = [u16; MAX_DEPTH];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    paths: Vec<Vec<u32>>,
    parents: Vec<i32>,
    depths: Vec<i32>,
    ranks: Vec<i32>,
    first_child: Vec<u32>,
    num_children: Vec<u32>,
    max_depth: usize,
}

fn path_cmp(a: &[u32], b: &[u32]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

impl Tree {
    /// A chain of `k` drafts (each node has one child of rank 0).
    pub fn chain(k: usize) -> Result<Self> {
        ensure(k <= MAX_DEPTH, "k", || {
            format!("chain length must be <= {MAX_DEPTH}, got {k}")
        })?;
        Self::from_paths((1..=k).map(|d| vec![0; d]).collect())
    }

    /// Builds a tree from rank paths given in any order. Rejects empty paths, duplicates,
    /// ranks or depths past the limits, and sets that are not ancestor-closed.
    pub fn from_paths(mut paths: Vec<Vec<u32>>) -> Result<Self> {
        for (i, p) in paths.iter().enumerate() {
            ensure(!p.is_empty(), "paths", || {
                format!("path {i} is empty (the root is implicit)")
            })?;
            ensure(p.len() <= MAX_DEPTH, "paths", || {
                format!("path {i} has depth {} > {MAX_DEPTH}", p.len())
            })?;
            if let Some(&r) = p.iter().find(|&&r| r > MAX_RANK) {
                return Err(Error::new(
                    "paths",
                    format!("path {i} has rank {r} > {MAX_RANK}"),
                ));
            }
        }
        paths.sort_unstable_by(|a, b| path_cmp(a, b));
        if let Some(w) = paths.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::new("paths", format!("duplicate path {:?}", w[0])));
        }
        let n = paths.len() + 1;
        let mut parents = vec![-1i32; n];
        let mut depths = vec![0i32; n];
        let mut ranks = vec![0i32; n];
        for (i, p) in paths.iter().enumerate() {
            let node = i + 1;
            depths[node] = p.len() as i32;
            ranks[node] = *p.last().unwrap() as i32;
            parents[node] = if p.len() == 1 {
                0
            } else {
                let prefix = &p[..p.len() - 1];
                match paths[..i].binary_search_by(|q| path_cmp(q, prefix)) {
                    Ok(j) => (j + 1) as i32,
                    Err(_) => {
                        return Err(Error::new(
                            "paths",
                            format!("not ancestor-closed: {p:?} needs its parent {prefix:?}"),
                        ))
                    }
                }
            };
        }
        Ok(Self::assemble(paths, parents, depths, ranks))
    }

    fn assemble(
        paths: Vec<Vec<u32>>,
        parents: Vec<i32>,
        depths: Vec<i32>,
        ranks: Vec<i32>,
    ) -> Self {
        let n = parents.len();
        let mut first_child = vec![0u32; n];
        let mut num_children = vec![0u32; n];
        for i in (1..n).rev() {
            let p = parents[i] as usize;
            first_child[p] = i as u32;
            num_children[p] += 1;
        }
        let max_depth = depths.iter().copied().max().unwrap_or(0) as usize;
        Self {
            paths,
            parents,
            depths,
            ranks,
            first_child,
            num_children,
            max_depth,
        }
    }

    #[inline]
    pub fn num_nodes(&self) -> usize {
        self.parents.len()
    }
    pub fn parents(&self) -> &[i32] {
        &self.parents
    }
    pub fn depths(&self) -> &[i32] {
        &self.depths
    }
    pub fn ranks(&self) -> &[i32] {
        &self.ranks
    }
    /// Rank paths of nodes 1.. (node order; the root has none).
    pub fn paths(&self) -> &[Vec<u32>] {
        &self.paths
    }
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Children of `node` in rank order.
    #[inline]
    pub fn children(&self, node: usize) -> std::ops::Range<usize> {
        let s = self.first_child[node] as usize;
        s..s + self.num_children[node] as usize
    }

    /// 1 + Σ over nodes of Π accept[depth-1][rank] along the node's path.
    pub fn expected_tokens(&self, accept: &[f64], k: usize, m: usize) -> Result<f64> {
        check_accept(accept, k, m)?;
        ensure(self.max_depth <= k, "accept", || {
            format!("tree depth {} exceeds accept rows {k}", self.max_depth)
        })?;
        let mut value = vec![1.0f64; self.num_nodes()];
        let mut total = 1.0;
        for i in 1..self.num_nodes() {
            let (d, r) = (self.depths[i] as usize - 1, self.ranks[i] as usize);
            ensure(r < m, "accept", || {
                format!("tree uses rank {r} but accept has {m} columns")
            })?;
            value[i] = value[self.parents[i] as usize] * accept[d * m + r];
            total += value[i];
        }
        Ok(total)
    }

    /// out [T, T]: out[i, j] = j is i or an ancestor of i.
    pub fn fill_ancestor_mask(&self, out: &mut [bool]) {
        let t = self.num_nodes();
        out.fill(false);
        for i in 0..t {
            let row = &mut out[i * t..(i + 1) * t];
            let mut j = i as i32;
            while j >= 0 {
                row[j as usize] = true;
                j = self.parents[j as usize];
            }
        }
    }

    /// out [T, past_len + T]: 0 where visible (all past, self and ancestors), -inf elsewhere.
    pub fn fill_attention_bias(&self, past_len: usize, out: &mut [f32]) {
        let t = self.num_nodes();
        let w = past_len + t;
        for i in 0..t {
            let row = &mut out[i * w..(i + 1) * w];
            row[..past_len].fill(0.0);
            row[past_len..].fill(f32::NEG_INFINITY);
            let mut j = i as i32;
            while j >= 0 {
                row[past_len + j as usize] = 0.0;
                j = self.parents[j as usize];
            }
        }
    }

    pub fn fill_position_ids(&self, past_len: i64, out: &mut [i64]) {
        for (o, &d) in out.iter_mut().zip(&self.depths) {
            *o = past_len + d as i64;
        }
    }

    pub fn leaves(&self) -> Vec<usize> {
        (0..self.num_nodes())
            .filter(|&i| self.num_children[i] == 0)
            .collect()
    }

    /// out [L, max_depth + 1]: root-to-leaf node ids, -1 padded, leaves in node order.
    pub fn fill_leaf_paths(&self, out: &mut [i32]) {
        let w = self.max_depth + 1;
        out.fill(-1);
        for (row, leaf) in self.leaves().into_iter().enumerate() {
            let mut j = leaf as i32;
            while j >= 0 {
                out[row * w + self.depths[j as usize] as usize] = j;
                j = self.parents[j as usize];
            }
        }
    }

    /// Best-first growth to `budget` nodes maximising Σ Π accept (see `GreedyOptions`).
    pub fn greedy(accept: &[f64], k: usize, m: usize, opts: &GreedyOptions) -> Result<Self> {
        check_accept(accept, k, m)?;
        let depth_cap = opts.max_depth.unwrap_or(k).min(k).min(MAX_DEPTH);
        let rank_cap = |d: usize| -> usize {
            let c = match &opts.max_rank {
                RankCap::None => m,
                RankCap::All(r) => *r,
                RankCap::PerDepth(v) => v.get(d).copied().unwrap_or(0),
            };
            c.min(m).min(MAX_RANK as usize + 1)
        };
        let capacity = greedy_capacity(depth_cap, &rank_cap, opts.budget);
        ensure(capacity >= opts.budget, "budget", || {
            format!(
                "{} nodes requested but only {capacity} fit within depth {depth_cap} and the rank caps",
                opts.budget
            )
        })?;
        let lazy = (0..depth_cap)
            .all(|d| (1..rank_cap(d)).all(|r| accept[d * m + r] <= accept[d * m + r - 1]));
        let mut heap = BinaryHeap::new();
        let push_children = |heap: &mut BinaryHeap<Cand>, c: &Cand| {
            let d = c.len as usize;
            if d >= depth_cap {
                return;
            }
            let cap = rank_cap(d);
            let upto = if lazy { cap.min(1) } else { cap };
            for r in 0..upto {
                heap.push(c.child(r as u16, accept[d * m + r]));
            }
        };
        let root = Cand {
            value: 1.0,
            parent_value: 1.0,
            path: [0; MAX_DEPTH],
            len: 0,
        };
        push_children(&mut heap, &root);
        let mut chosen: Vec<Cand> = Vec::with_capacity(opts.budget);
        while chosen.len() < opts.budget {
            let c = heap.pop().expect("capacity was checked");
            let d = c.len as usize - 1;
            let r = c.path[d] as usize;
            if lazy && r + 1 < rank_cap(d) {
                let mut sib = c;
                sib.path[d] = (r + 1) as u16;
                sib.value = c.parent_value * accept[d * m + r + 1];
                heap.push(sib);
            }
            push_children(&mut heap, &c);
            chosen.push(c);
        }
        let paths = chosen
            .iter()
            .map(|c| c.path[..c.len as usize].iter().map(|&r| r as u32).collect())
            .collect();
        Self::from_paths(paths)
    }

    pub fn to_json(&self) -> String {
        let body: Vec<String> = self
            .paths
            .iter()
            .map(|p| {
                let r: Vec<String> = p.iter().map(|x| x.to_string()).collect();
                format!("[{}]", r.join(", "))
            })
            .collect();
        format!(
            "{{\"format\": \"codecspec.tree\", \"version\": 1, \"paths\": [{}]}}",
            body.join(", ")
        )
    }
}

fn check_accept(accept: &[f64], k: usize, m: usize) -> Result<()> {
    ensure(accept.len() == k * m, "accept", || {
        format!("expected {k}x{m} = {} values, got {}", k * m, accept.len())
    })?;
    if let Some(i) = accept.iter().position(|a| !(0.0..=1.0).contains(a)) {
        return Err(Error::new(
            "accept",
            format!(
                "accept[{}, {}] = {} is outside [0, 1]",
                i / m.max(1),
                i % m.max(1),
                accept[i]
            ),
        ));
    }
    Ok(())
}

/// How many nodes exist at all under the caps (saturating at `need`).
fn greedy_capacity(depth_cap: usize, rank_cap: &dyn Fn(usize) -> usize, need: usize) -> usize {
    let (mut level, mut total) = (1usize, 0usize);
    for d in 0..depth_cap {
        level = level.saturating_mul(rank_cap(d));
        total = total.saturating_add(level);
        if total >= need || level == 0 {
            break;
        }
    }
    total
}

#[derive(Clone, Debug, Default)]
pub enum RankCap {
    #[default]
    None,
    All(usize),
    PerDepth(Vec<usize>),
}

#[derive(Clone, Debug, Default)]
pub struct GreedyOptions {
    /// Nodes besides the root.
    pub budget: usize,
    pub max_depth: Option<usize>,
    pub max_rank: RankCap,
}

/// A candidate node in the best-first frontier. Heap order: larger value first, then the
/// lexicographically smaller path, which puts an ancestor before a descendant of equal value
/// and makes the result independent of heap internals.
#[derive(Clone, Copy)]
struct Cand {
    value: f64,
    parent_value: f64,
    path: Path,
    len: u8,
}

impl Cand {
    fn child(&self, rank: u16, a: f64) -> Cand {
        let mut path = self.path;
        path[self.len as usize] = rank;
        Cand {
            value: self.value * a,
            parent_value: self.value,
            path,
            len: self.len + 1,
        }
    }

    fn lex(&self, other: &Self) -> Ordering {
        // Zero padding plus length as the final key is exactly lexicographic order on paths.
        self.path.cmp(&other.path).then(self.len.cmp(&other.len))
    }
}

impl PartialEq for Cand {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Cand {}
impl PartialOrd for Cand {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Cand {
    fn cmp(&self, other: &Self) -> Ordering {
        self.value
            .total_cmp(&other.value)
            .then_with(|| other.lex(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_paths_orders_canonically() {
        let t = Tree::from_paths(vec![vec![0, 0], vec![1], vec![0]]).unwrap();
        assert_eq!(t.parents(), &[-1, 0, 0, 1]);
        assert_eq!(t.depths(), &[0, 1, 1, 2]);
        assert_eq!(t.ranks(), &[0, 0, 1, 0]);
        assert_eq!(t.children(0), 1..3);
        assert_eq!(t.children(1), 3..4);
        assert!(t.children(2).is_empty());
    }

    #[test]
    fn rejects_open_and_duplicate_sets() {
        assert_eq!(Tree::from_paths(vec![vec![0, 1]]).unwrap_err().arg, "paths");
        assert!(Tree::from_paths(vec![vec![0], vec![0]]).is_err());
        assert!(Tree::from_paths(vec![vec![]]).is_err());
    }

    #[test]
    fn masks_and_leaves() {
        let t = Tree::from_paths(vec![vec![0], vec![1], vec![0, 0]]).unwrap();
        let mut m = vec![false; 16];
        t.fill_ancestor_mask(&mut m);
        assert!(m[3 * 4] && m[3 * 4 + 1] && m[3 * 4 + 3] && !m[3 * 4 + 2]);
        let mut lp = vec![0; 2 * 3];
        t.fill_leaf_paths(&mut lp);
        assert_eq!(lp, vec![0, 2, -1, 0, 1, 3]);
        let mut bias = vec![0.0; 4 * 6];
        t.fill_attention_bias(2, &mut bias);
        assert_eq!(
            &bias[2 * 6..3 * 6],
            &[0.0, 0.0, 0.0, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY]
        );
    }

    #[test]
    fn greedy_lazy_and_eager_agree_on_monotone_input() {
        let accept = [0.8, 0.1, 0.05, 0.6, 0.2, 0.1, 0.5, 0.3, 0.1];
        let t = Tree::greedy(
            &accept,
            3,
            3,
            &GreedyOptions {
                budget: 6,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(t.num_nodes(), 7);
        // Values: (0)=.8 (0,0)=.48 (0,0,0)=.24 (0,1)=.16 (0,0,1)=.144 (1)=.1 ...
        assert_eq!(
            t.paths(),
            &[
                vec![0],
                vec![1],
                vec![0, 0],
                vec![0, 1],
                vec![0, 0, 0],
                vec![0, 0, 1]
            ]
        );
        let e = t.expected_tokens(&accept, 3, 3).unwrap();
        assert!((e - (1.0 + 0.8 + 0.1 + 0.48 + 0.16 + 0.24 + 0.144)).abs() < 1e-12);
    }

    #[test]
    fn greedy_handles_non_monotone_ranks() {
        let accept = [0.1, 0.9];
        let t = Tree::greedy(
            &accept,
            1,
            2,
            &GreedyOptions {
                budget: 1,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(t.paths(), &[vec![1]]);
    }

    #[test]
    fn greedy_budget_beyond_capacity_is_an_error() {
        let accept = [0.5, 0.5];
        let e = Tree::greedy(
            &accept,
            1,
            2,
            &GreedyOptions {
                budget: 3,
                ..Default::default()
            },
        );
        assert_eq!(e.unwrap_err().arg, "budget");
    }
}
