//! verify_chain, verify_tree, verify_tree_batch and their result type.

use codecspec_core::verify::{self, DraftKind, TreeProblem, Verified};
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::convert::{arg_error, array, int32_array, run, value_error};
use crate::sampling::{PyGenerator, PySamplingParams};
use crate::tree::PyDraftTree;

/// Outcome of one verify call: accepted drafts then exactly one correction/bonus token.
#[pyclass(name = "VerifyResult", module = "codecspec._core", frozen)]
pub struct PyVerifyResult {
    pub tokens: Vec<i32>,
    pub nodes: Vec<i32>,
    pub groups: Option<Vec<i32>>,
}

impl PyVerifyResult {
    pub fn from_core(v: Verified, groups: Option<Vec<i32>>) -> Self {
        Self {
            tokens: v.tokens,
            nodes: v.nodes,
            groups,
        }
    }
}

#[pymethods]
impl PyVerifyResult {
    /// int32: accepted draft tokens, then one correction or bonus token.
    #[getter]
    fn tokens<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        PyArray1::from_slice(py, &self.tokens)
    }
    /// int32: accepted tree nodes (root excluded), in path order — the rows to commit.
    #[getter]
    fn nodes<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        PyArray1::from_slice(py, &self.nodes)
    }
    #[getter]
    fn num_accepted(&self) -> usize {
        self.nodes.len()
    }
    /// int32 group id of every emitted token (coarse verification only; None otherwise).
    #[getter]
    fn groups<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArray1<i32>>> {
        self.groups.as_ref().map(|g| PyArray1::from_slice(py, g))
    }
    fn __repr__(&self) -> String {
        format!(
            "VerifyResult(tokens={:?}, nodes={:?}, num_accepted={})",
            self.tokens,
            self.nodes,
            self.nodes.len()
        )
    }
}

/// `tolerance` as a float in [0, 1]: any real number (not bool); NaN, infinities, values outside
/// [0, 1] and non-numbers are ValueErrors naming `tolerance`.
fn tolerance_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
    let Some(obj) = obj else { return Ok(0.0) };
    if obj.is_none() {
        return Ok(0.0);
    }
    let bad = || {
        arg_error(
            "tolerance",
            format!(
                "must be a number in [0, 1], got {}",
                obj.repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| "?".into())
            ),
        )
    };
    if obj.is_instance_of::<pyo3::types::PyBool>() || obj.is_instance_of::<pyo3::types::PyString>()
    {
        return Err(bad());
    }
    let b: f64 = obj.extract().map_err(|_| bad())?;
    if !(0.0..=1.0).contains(&b) {
        return Err(bad());
    }
    Ok(b)
}

/// Verifies a chain of K drafts. target_logits [K+1, V] (row j = target after draft j; row K
/// is the bonus position); draft_tokens [K]; draft_probs [K, V] = the law each draft was drawn
/// from (None = point masses, e.g. a greedy drafter). ValueError naming the argument for bad
/// shapes, NaN/+inf logits, out-of-range tokens, or invalid probability rows.
///
/// tolerance = SSD's beta in [0, 1]: draft x is accepted iff u < min(1, p(x)/q(x)) + beta; on
/// rejection the correction comes from the usual residual norm(max(p - q, 0)) (p if that is all
/// zero). 0.0 (the default) is exact speculative sampling, bit-identical to omitting it.
/// tolerance > 0 is LOSSY by design: the output no longer follows the target law (a draft the
/// warped target gives zero probability can be accepted). Greedy ignores it.
#[pyfunction]
#[pyo3(
    signature = (target_logits, draft_tokens, params, generator, draft_probs=None, tolerance=None),
    text_signature = "(target_logits, draft_tokens, params, generator, draft_probs=None, tolerance=0.0)"
)]
#[allow(clippy::too_many_arguments)]
pub fn verify_chain(
    py: Python<'_>,
    target_logits: &Bound<'_, PyAny>,
    draft_tokens: &Bound<'_, PyAny>,
    params: &PySamplingParams,
    generator: &mut PyGenerator,
    draft_probs: Option<&Bound<'_, PyAny>>,
    tolerance: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyVerifyResult> {
    let beta = tolerance_arg(tolerance)?;
    let l = array::<f32>(target_logits, "target_logits", "float32")?;
    l.require_ndim("target_logits", 2)?;
    let d = int32_array(draft_tokens, "draft_tokens")?;
    d.require_ndim("draft_tokens", 1)?;
    let q = draft_probs
        .map(|q| array::<f32>(q, "draft_probs", "float32"))
        .transpose()?;
    if let Some(q) = &q {
        q.require_ndim("draft_probs", 2)?;
    }
    let (ld, dd) = (l.data()?, d.data()?);
    let qd = q.as_ref().map(|q| q.data()).transpose()?;
    let (v, p) = (l.last(), crate::sampling::verify_params(params)?);
    let mut g = generator.inner;
    let r = run(py, || {
        verify::verify_chain_tolerant(&ld, v, &dd, qd.as_deref(), &p, &mut g, beta)
    })?;
    generator.inner = g;
    Ok(PyVerifyResult::from_core(r, None))
}

struct TreeInputs<'py> {
    logits: crate::convert::ArrayView<'py, f32>,
    tokens: crate::convert::ArrayView<'py, i32>,
    probs: Option<crate::convert::ArrayView<'py, f32>>,
    kind: DraftKind,
}

fn tree_inputs<'py>(
    node_tokens: &Bound<'py, PyAny>,
    target_logits: &Bound<'py, PyAny>,
    draft_probs: Option<&Bound<'py, PyAny>>,
    draft_kind: &str,
) -> PyResult<TreeInputs<'py>> {
    let kind = DraftKind::parse(draft_kind).map_err(value_error)?;
    let logits = array::<f32>(target_logits, "target_logits", "float32")?;
    logits.require_ndim("target_logits", 2)?;
    let tokens = int32_array(node_tokens, "node_tokens")?;
    tokens.require_ndim("node_tokens", 1)?;
    let probs = draft_probs
        .map(|q| array::<f32>(q, "draft_probs", "float32"))
        .transpose()?;
    if let Some(q) = &probs {
        q.require_ndim("draft_probs", 2)?;
        if q.shape != logits.shape {
            return Err(arg_error(
                "draft_probs",
                format!(
                    "shape {:?} must equal target_logits' {:?}",
                    q.shape, logits.shape
                ),
            ));
        }
    }
    Ok(TreeInputs {
        logits,
        tokens,
        probs,
        kind,
    })
}

/// Verifies a draft tree in one pass (see docs/design.md §2 for the residual rules).
/// node_tokens [T] int in [0, V) (node 0 = the root); target_logits [T, V]: row i =
/// target law of the token after node i; draft_probs [T, V]: row i = the law node i's children
/// were drawn from (None = point masses); draft_kind 'topk' (distinct deterministic children),
/// 'iid' (SpecInfer) or 'swor' (Sequoia). Children are tested in rank order.
#[pyfunction]
#[pyo3(signature = (tree, node_tokens, target_logits, params, generator, draft_probs=None, draft_kind="topk"))]
#[allow(clippy::too_many_arguments)]
pub fn verify_tree(
    py: Python<'_>,
    tree: &PyDraftTree,
    node_tokens: &Bound<'_, PyAny>,
    target_logits: &Bound<'_, PyAny>,
    params: &PySamplingParams,
    generator: &mut PyGenerator,
    draft_probs: Option<&Bound<'_, PyAny>>,
    draft_kind: &str,
) -> PyResult<PyVerifyResult> {
    let inp = tree_inputs(node_tokens, target_logits, draft_probs, draft_kind)?;
    let (ld, td) = (inp.logits.data()?, inp.tokens.data()?);
    let qd = inp.probs.as_ref().map(|q| q.data()).transpose()?;
    let problem = TreeProblem {
        tree: &tree.inner,
        node_tokens: &td,
        target_logits: &ld,
        draft_probs: qd.as_deref(),
        vocab: inp.logits.last(),
        kind: inp.kind,
    };
    let p = crate::sampling::verify_params(params)?;
    let mut g = generator.inner;
    let r = run(py, || verify::verify_tree(&problem, &p, &mut g))?;
    generator.inner = g;
    Ok(PyVerifyResult::from_core(r, None))
}

/// Verifies B independent streams with ragged trees in parallel (GIL released).
/// node_tokens [ΣT_b], target_logits [ΣT_b, V], draft_probs [ΣT_b, V] or None: the streams'
/// rows concatenated in order; generators: one per stream. Stream b's result equals
/// verify_tree on its own rows with generators[b].
#[pyfunction]
#[pyo3(signature = (trees, node_tokens, target_logits, params, generators, draft_probs=None, draft_kind="topk"))]
#[allow(clippy::too_many_arguments)]
pub fn verify_tree_batch(
    py: Python<'_>,
    trees: Vec<PyRef<'_, PyDraftTree>>,
    node_tokens: &Bound<'_, PyAny>,
    target_logits: &Bound<'_, PyAny>,
    params: &PySamplingParams,
    generators: Vec<PyRefMut<'_, PyGenerator>>,
    draft_probs: Option<&Bound<'_, PyAny>>,
    draft_kind: &str,
) -> PyResult<Vec<PyVerifyResult>> {
    if generators.len() != trees.len() {
        return Err(arg_error(
            "generators",
            format!(
                "expected {} generators (one per tree), got {}",
                trees.len(),
                generators.len()
            ),
        ));
    }
    let inp = tree_inputs(node_tokens, target_logits, draft_probs, draft_kind)?;
    let total: usize = trees.iter().map(|t| t.inner.num_nodes()).sum();
    if inp.tokens.shape[0] != total {
        return Err(arg_error(
            "node_tokens",
            format!(
                "expected {total} entries (sum of tree sizes), got {}",
                inp.tokens.shape[0]
            ),
        ));
    }
    if inp.logits.shape[0] != total {
        return Err(arg_error(
            "target_logits",
            format!(
                "expected {total} rows (sum of tree sizes), got {}",
                inp.logits.shape[0]
            ),
        ));
    }
    let v = inp.logits.last();
    let (ld, td) = (inp.logits.data()?, inp.tokens.data()?);
    let qd = inp.probs.as_ref().map(|q| q.data()).transpose()?;
    let mut problems = Vec::with_capacity(trees.len());
    let mut start = 0;
    for t in &trees {
        let n = t.inner.num_nodes();
        problems.push(TreeProblem {
            tree: &t.inner,
            node_tokens: &td[start..start + n],
            target_logits: &ld[start * v..(start + n) * v],
            draft_probs: qd.as_deref().map(|q| &q[start * v..(start + n) * v]),
            vocab: v,
            kind: inp.kind,
        });
        start += n;
    }
    let p = crate::sampling::verify_params(params)?;
    let mut gens: Vec<_> = generators.iter().map(|g| g.inner).collect();
    let results = run(py, || verify::verify_tree_batch(&problems, &p, &mut gens))?;
    for (mut g, new) in generators.into_iter().zip(gens) {
        g.inner = new;
    }
    Ok(results
        .into_iter()
        .map(|r| PyVerifyResult::from_core(r, None))
        .collect())
}
