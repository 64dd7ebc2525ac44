//! AcousticGroups, verify_chain_coarse and verify_tree_coarse (coarse-grained acceptance).

use codecspec_core::coarse_tree::{self, RowGroups};
use codecspec_core::groups::{self as core_groups, AcousticGroups};
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;

use crate::convert::{arg_error, array, int32_array, run};
use crate::sampling::{PyGenerator, PySamplingParams};
use crate::tree::PyDraftTree;
use crate::verify::PyVerifyResult;

/// Overlapping acoustic similarity groups over a token vocabulary.
///
/// Group k = {t : cos(e_k, e_t) >= threshold} ∪ {k} (from_embeddings) or given explicitly
/// (from_members). Each token's probability mass is split evenly among the groups that contain
/// it: w[k, t] = 1 / |groups_of(t)|, and a law p over tokens has the coarse law
/// P_c(k) = Σ_t w[k, t] p(t) over groups.
#[pyclass(name = "AcousticGroups", module = "codecspec._core", frozen)]
pub struct PyAcousticGroups {
    pub inner: AcousticGroups,
}

fn index(x: i64, n: usize, arg: &str, what: &str) -> PyResult<usize> {
    if x < 0 || x as u64 >= n as u64 {
        return Err(arg_error(arg, format!("{what} {x} is outside [0, {n})")));
    }
    Ok(x as usize)
}

fn as_i32(v: &[u32]) -> Vec<i32> {
    v.iter().map(|&x| x as i32).collect()
}

#[pymethods]
impl PyAcousticGroups {
    /// Groups from token embeddings emb [V, D] (float32; converted if needed): group k holds
    /// every token t with cos(e_k, e_t) >= threshold (compared in float32), and always k.
    /// Tokens listed in `singletons` form a group of their own and belong to no other group.
    /// Blocked brute-force cosine matrix, parallel, GIL released.
    ///
    /// Raises ValueError naming `emb` (not 2-d, empty, NaN/inf, an all-zero row), `threshold`
    /// (not finite, or so low that more than 2^27 pairs qualify) or `singletons` (negative or
    /// >= V).
    #[staticmethod]
    #[pyo3(
        signature = (emb, threshold, singletons=None),
        text_signature = "(emb, threshold, singletons=())"
    )]
    fn from_embeddings(
        py: Python<'_>,
        emb: &Bound<'_, PyAny>,
        threshold: f64,
        singletons: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let e = array::<f32>(emb, "emb", "float32")?;
        e.require_ndim("emb", 2)?;
        let (v, d) = (e.shape[0], e.shape[1]);
        if v == 0 || d == 0 {
            return Err(arg_error(
                "emb",
                format!("expected shape [V, D] with V, D > 0, got {:?}", e.shape),
            ));
        }
        let singles: Vec<u32> = match singletons {
            None => Vec::new(),
            Some(s) => {
                let s = int32_array(s, "singletons")?;
                let data = s.data()?;
                data.iter()
                    .map(|&x| {
                        u32::try_from(x).map_err(|_| {
                            arg_error("singletons", format!("token {x} is outside [0, {v})"))
                        })
                    })
                    .collect::<PyResult<_>>()?
            }
        };
        let data = e.data()?;
        let th = threshold as f32;
        if threshold.is_finite() && !th.is_finite() {
            return Err(arg_error(
                "threshold",
                format!("{threshold} does not fit in float32"),
            ));
        }
        let inner = run(py, || {
            AcousticGroups::from_embeddings(&data, d, th, &singles)
        })?;
        Ok(Self { inner })
    }

    /// Groups given explicitly: members[k] = the token ids of group k (any order, stored
    /// sorted). Raises ValueError naming `members` for an empty group, an id outside
    /// [0, vocab_size), an id repeated within a group, or a token in no group; and naming
    /// `vocab_size` if it is not > 0.
    #[staticmethod]
    fn from_members(py: Python<'_>, members: &Bound<'_, PyAny>, vocab_size: i64) -> PyResult<Self> {
        if vocab_size <= 0 || vocab_size > u32::MAX as i64 {
            return Err(arg_error(
                "vocab_size",
                format!("must be in [1, 2^32), got {vocab_size}"),
            ));
        }
        let raw: Vec<Vec<i64>> = members.extract().map_err(|e| {
            arg_error(
                "members",
                format!("expected a sequence of integer sequences: {e}"),
            )
        })?;
        let mut groups = Vec::with_capacity(raw.len());
        for (k, m) in raw.into_iter().enumerate() {
            let g: Vec<u32> = m
                .into_iter()
                .map(|t| {
                    if t < 0 || t >= vocab_size {
                        Err(arg_error(
                            "members",
                            format!("group {k} holds token {t}, outside [0, {vocab_size})"),
                        ))
                    } else {
                        Ok(t as u32)
                    }
                })
                .collect::<PyResult<_>>()?;
            groups.push(g);
        }
        let v = vocab_size as usize;
        let inner = run(py, || AcousticGroups::from_members(groups, v))?;
        Ok(Self { inner })
    }

    #[getter]
    fn num_groups(&self) -> usize {
        self.inner.num_groups()
    }

    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    /// Total number of (group, token) memberships.
    #[getter]
    fn nnz(&self) -> usize {
        self.inner.nnz()
    }

    /// int32 token ids of group k, ascending. ValueError naming `k` if out of range.
    fn members<'py>(&self, py: Python<'py>, k: i64) -> PyResult<Bound<'py, PyArray1<i32>>> {
        let k = index(k, self.inner.num_groups(), "k", "group")?;
        Ok(PyArray1::from_vec(py, as_i32(self.inner.members(k))))
    }

    /// int32 ids of the groups containing token t, ascending. ValueError naming `t` if out of
    /// range.
    fn groups_of<'py>(&self, py: Python<'py>, t: i64) -> PyResult<Bound<'py, PyArray1<i32>>> {
        let t = index(t, self.inner.vocab_size(), "t", "token")?;
        Ok(PyArray1::from_vec(py, as_i32(self.inner.groups_of(t))))
    }

    /// Coarse laws of probs [..., V] → [..., num_groups]: P_c(k) = Σ_t w[k, t] p(t), summed in
    /// float64. float32 input gives float32 output; anything else is converted to float64 and
    /// gives float64. Raises ValueError naming `probs` for a wrong last axis, NaN/inf or
    /// negative entries.
    fn coarse<'py>(&self, py: Python<'py>, probs: &Bound<'py, PyAny>) -> PyResult<Py<PyAny>> {
        if probs.cast::<PyArrayDyn<f32>>().is_ok() {
            Ok(self
                .coarse_as::<f32>(py, probs, "float32")?
                .into_any()
                .unbind())
        } else {
            Ok(self
                .coarse_as::<f64>(py, probs, "float64")?
                .into_any()
                .unbind())
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "AcousticGroups(vocab_size={}, num_groups={}, nnz={})",
            self.inner.vocab_size(),
            self.inner.num_groups(),
            self.inner.nnz()
        )
    }
}

impl PyAcousticGroups {
    fn coarse_as<'py, T: core_groups::Real + numpy::Element>(
        &self,
        py: Python<'py>,
        probs: &Bound<'py, PyAny>,
        dtype: &str,
    ) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
        let p = array::<T>(probs, "probs", dtype)?;
        let v = self.inner.vocab_size();
        if p.ndim() == 0 || p.last() != v {
            return Err(arg_error(
                "probs",
                format!(
                    "expected shape [..., {v}] (V = vocab_size), got {:?}",
                    p.shape
                ),
            ));
        }
        let mut shape = p.shape.clone();
        *shape.last_mut().unwrap() = self.inner.num_groups();
        let data = p.data()?;
        let out = PyArrayDyn::<T>::zeros(py, shape, false);
        {
            let mut w = out.readwrite();
            let o = w.as_slice_mut().expect("fresh array is contiguous");
            let g = &self.inner;
            run(py, || g.coarse(&data, o))?;
        }
        Ok(out)
    }
}

/// Coarse-grained chain verification (PCG, docs/design.md §2): draft j's group k is drawn from
/// w[·, x_j] and accepted iff u·Q_c(k) <= P_c(k); on rejection a group is drawn from
/// norm(max(P_c − Q_c, 0)) and a token inside it from p weighted by w. The law of the emitted
/// groups (result.groups) equals the target's coarse law; with all-singleton groups the result
/// equals verify_chain's bit for bit.
///
/// target_logits [K+1, V] (row j = target after draft j, row K = bonus position);
/// draft_tokens [K] int; draft_probs [K, V] (required: the law each draft was drawn from);
/// V = groups.vocab_size. Advances the generator by one step unless greedy. Greedy
/// (temperature 0) accepts draft j iff it shares a group with the target's argmax (emitted with
/// the lowest shared group), else emits the argmax with its lowest group; it draws nothing.
/// Raises ValueError naming the argument for wrong shapes, NaN/+inf logits, out-of-range tokens
/// or invalid probability rows.
#[pyfunction]
pub fn verify_chain_coarse(
    py: Python<'_>,
    groups: &PyAcousticGroups,
    target_logits: &Bound<'_, PyAny>,
    draft_tokens: &Bound<'_, PyAny>,
    draft_probs: &Bound<'_, PyAny>,
    params: &PySamplingParams,
    generator: &mut PyGenerator,
) -> PyResult<PyVerifyResult> {
    let v = groups.inner.vocab_size();
    let l = array::<f32>(target_logits, "target_logits", "float32")?;
    l.require_ndim("target_logits", 2)?;
    if l.last() != v {
        return Err(arg_error(
            "target_logits",
            format!(
                "expected shape [K+1, {v}] (V = groups.vocab_size), got {:?}",
                l.shape
            ),
        ));
    }
    let d = int32_array(draft_tokens, "draft_tokens")?;
    d.require_ndim("draft_tokens", 1)?;
    let q = array::<f32>(draft_probs, "draft_probs", "float32")?;
    q.require_ndim("draft_probs", 2)?;
    let k = d.shape[0];
    if q.shape != [k, v] {
        return Err(arg_error(
            "draft_probs",
            format!("expected shape [{k}, {v}], got {:?}", q.shape),
        ));
    }
    let (ld, dd, qd) = (l.data()?, d.data()?, q.data()?);
    let p = crate::sampling::verify_params(params)?;
    let mut g = generator.inner;
    let grp = &groups.inner;
    let (r, gids) = run(py, || {
        core_groups::verify_chain_coarse(grp, &ld, &dd, &qd, &p, &mut g)
    })?;
    generator.inner = g;
    Ok(PyVerifyResult::from_core(r, Some(gids)))
}

/// Coarse-grained verification of a top-k (deterministic children) draft tree (docs/design.md §2,
/// "Coarse-grained acceptance in a top-k tree"): at each visited node a group G ~ P_c (the
/// coarse law of the node's target row) is drawn one child at a time: the walk descends into
/// the lowest-rank child whose token belongs to G (that token is G's representative), else it
/// emits a token drawn from p·w[G, ·] inside G; a leaf emits its bonus token from p. The emitted
/// group (result.groups) at every position follows the target's coarse law given the emitted
/// prefix; with all-singleton groups the result equals verify_tree(..., draft_kind="topk") for
/// the same generator state, bit for bit.
///
/// groups: one AcousticGroups for every row, or a sequence of T of them (row i's groups judge
/// node i's children, e.g. per RVQ level), each over V = target_logits.shape[1] tokens.
/// tree, node_tokens [T] (node 0 = the root; siblings distinct), target_logits [T, V] as in
/// verify_tree. Advances the generator by one step unless greedy. Greedy (temperature 0)
/// descends into the lowest-rank child sharing a group with the row's argmax (emitted with the
/// lowest shared group), else emits the argmax with its lowest group; it draws nothing.
/// Raises ValueError naming the argument (`groups` for a non-AcousticGroups, a list of the wrong
/// length or another vocabulary size; the others as verify_tree does).
#[pyfunction]
pub fn verify_tree_coarse(
    py: Python<'_>,
    groups: &Bound<'_, PyAny>,
    tree: &PyDraftTree,
    node_tokens: &Bound<'_, PyAny>,
    target_logits: &Bound<'_, PyAny>,
    params: &PySamplingParams,
    generator: &mut PyGenerator,
) -> PyResult<PyVerifyResult> {
    let l = array::<f32>(target_logits, "target_logits", "float32")?;
    l.require_ndim("target_logits", 2)?;
    let tok = int32_array(node_tokens, "node_tokens")?;
    tok.require_ndim("node_tokens", 1)?;
    let shared = groups.cast::<PyAcousticGroups>().ok().cloned();
    let per_row: Vec<Bound<'_, PyAcousticGroups>> = match shared {
        Some(_) => Vec::new(),
        None => row_groups(groups)?,
    };
    let per_row_refs: Vec<&AcousticGroups> = per_row.iter().map(|g| &g.get().inner).collect();
    let rg = match &shared {
        Some(g) => RowGroups::Shared(&g.get().inner),
        None => RowGroups::PerRow(&per_row_refs),
    };
    let (ld, td) = (l.data()?, tok.data()?);
    let (v, p, t) = (
        l.last(),
        crate::sampling::verify_params(params)?,
        &tree.inner,
    );
    let mut g = generator.inner;
    let (r, gids) = run(py, || {
        coarse_tree::verify_tree_coarse(rg, t, &td, &ld, v, &p, &mut g)
    })?;
    generator.inner = g;
    Ok(PyVerifyResult::from_core(r, Some(gids)))
}

/// A list/tuple (any sequence but str/bytes) of AcousticGroups.
fn row_groups<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAcousticGroups>>> {
    let not_groups = || {
        arg_error(
            "groups",
            format!(
                "expected an AcousticGroups or a list of them (one per tree row), got {}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "?".into())
            ),
        )
    };
    if obj.is_instance_of::<pyo3::types::PyString>() || obj.is_instance_of::<pyo3::types::PyBytes>()
    {
        return Err(not_groups());
    }
    let items = obj.try_iter().map_err(|_| not_groups())?;
    let mut out = Vec::new();
    for (i, item) in items.enumerate() {
        let item = item.map_err(|_| not_groups())?;
        let g = item.cast_into::<PyAcousticGroups>().map_err(|e| {
            arg_error(
                "groups",
                format!(
                    "entry {i} is not an AcousticGroups (got {})",
                    e.into_inner()
                        .get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_else(|_| "?".into())
                ),
            )
        })?;
        out.push(g);
    }
    Ok(out)
}
