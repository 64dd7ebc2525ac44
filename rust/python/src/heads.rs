//! HeadBank: frozen LM heads evaluated on the host for the rows a verify walk needs.

use std::sync::Arc;

use codecspec_core::heads::HeadBank;
use codecspec_core::verify::{self, HiddenRows, TreeProblem};
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;

use crate::convert::{arg_error, array, int32_array, run, value_error};
use crate::sampling::{PyGenerator, PySamplingParams};
use crate::tree::PyDraftTree;
use crate::verify::PyVerifyResult;

/// Linear heads without bias, weights float32 [num_heads, V, H] (copied once).
///
/// Used with graphs built with heads="hidden": the graph returns final-norm hidden states and
/// only the target rows that verification visits (and one node's draft rows) are computed.
#[pyclass(name = "HeadBank", module = "codecspec._core", frozen)]
pub struct PyHeadBank {
    pub inner: Arc<HeadBank>,
}

#[pymethods]
impl PyHeadBank {
    #[new]
    fn new(py: Python<'_>, weights: &Bound<'_, PyAny>) -> PyResult<Self> {
        let w = array::<f32>(weights, "weights", "float32")?;
        w.require_ndim("weights", 3)?;
        let (n, v, h) = (w.shape[0], w.shape[1], w.shape[2]);
        let data = w.data()?.into_owned();
        let bank = run(py, || HeadBank::new(data, n, v, h))?;
        Ok(Self {
            inner: Arc::new(bank),
        })
    }

    #[getter]
    fn num_heads(&self) -> usize {
        self.inner.num_heads()
    }
    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab()
    }
    #[getter]
    fn hidden_size(&self) -> usize {
        self.inner.hidden()
    }
    /// True when every weight is exactly a bf16 value, so targets read the half-size array.
    #[getter]
    fn targets_bf16(&self) -> bool {
        self.inner.targets_bf16()
    }

    /// float32 [V] logits of head `head` on z (+ offset).
    #[pyo3(signature = (head, z, offset=None))]
    fn logits<'py>(
        &self,
        py: Python<'py>,
        head: i64,
        z: &Bound<'py, PyAny>,
        offset: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let hd = self.inner.check_head(head, "head").map_err(value_error)?;
        let zz = vector(z, "z", self.inner.hidden())?;
        let off = offset
            .map(|o| vector(o, "offset", self.inner.hidden()))
            .transpose()?;
        let out = PyArray1::<f32>::zeros(py, self.inner.vocab(), false);
        let o = unsafe { out.as_slice_mut() }.expect("fresh array");
        let bank = self.inner.clone();
        run(py, || {
            bank.logits_into(hd, &zz, off.as_deref(), o);
            Ok(())
        })?;
        Ok(out)
    }

    /// float32 [n, V] logits of head `head` on each row of z [n, H]: `logits` row by row,
    /// the same floats, each weight row read once for all rows.
    fn logits_rows<'py>(
        &self,
        py: Python<'py>,
        head: i64,
        z: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let hd = self.inner.check_head(head, "head").map_err(value_error)?;
        let zz = array::<f32>(z, "z", "float32")?;
        zz.require_ndim("z", 2)?;
        let (n, h) = (zz.shape[0], zz.shape[1]);
        if h != self.inner.hidden() {
            return Err(arg_error(
                "z",
                format!(
                    "expected rows of {} values, got shape [{n}, {h}]",
                    self.inner.hidden()
                ),
            ));
        }
        let data = zz.data()?.into_owned();
        let v = self.inner.vocab();
        let out = PyArray2::<f32>::zeros(py, [n, v], false);
        let o = unsafe { out.as_slice_mut() }.expect("fresh array");
        let bank = self.inner.clone();
        if n > 0 {
            run(py, || {
                bank.logits_rows_into(hd, &data, n, o);
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// int32 [K, m]: the top-m tokens of head min(first_head + j, last) on z + offsets[j], for
    /// j < K (offsets [K, H]) — the candidates of the next round's draft tree, best first.
    fn draft_candidates<'py>(
        &self,
        py: Python<'py>,
        z: &Bound<'py, PyAny>,
        first_head: i64,
        offsets: &Bound<'py, PyAny>,
        m: i64,
    ) -> PyResult<Bound<'py, PyArray2<i32>>> {
        let zz = vector(z, "z", self.inner.hidden())?;
        let first = self
            .inner
            .check_head(first_head, "first_head")
            .map_err(value_error)?;
        let off = array::<f32>(offsets, "offsets", "float32")?;
        off.require_ndim("offsets", 2)?;
        let k = off.shape[0];
        if m < 1 {
            return Err(arg_error("m", format!("must be >= 1, got {m}")));
        }
        let od = off.data()?;
        let out = PyArray2::<i32>::zeros(py, [k, m as usize], false);
        let o = unsafe { out.as_slice_mut() }.expect("fresh array");
        let bank = self.inner.clone();
        run(py, || {
            bank.draft_candidates(&zz, first, &od, k, m as usize, o)
        })?;
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!(
            "HeadBank(num_heads={}, vocab_size={}, hidden_size={})",
            self.inner.num_heads(),
            self.inner.vocab(),
            self.inner.hidden()
        )
    }
}

fn vector(obj: &Bound<'_, PyAny>, arg: &str, n: usize) -> PyResult<Vec<f32>> {
    let a = array::<f32>(obj, arg, "float32")?;
    let d = a.data()?;
    if d.len() != n {
        return Err(arg_error(
            arg,
            format!("expected {n} values, got shape {:?}", a.shape),
        ));
    }
    Ok(d.into_owned())
}

/// verify_tree with target logits computed lazily: hidden [T, H] final-norm states of the
/// query nodes, node_heads [T] the head reading each node. Same law and same draws as
/// verify_tree on the materialised logits.
#[pyfunction]
#[pyo3(signature = (tree, node_tokens, hidden, node_heads, bank, params, generator, draft_probs=None, draft_kind="topk"))]
#[allow(clippy::too_many_arguments)]
pub fn verify_tree_hidden(
    py: Python<'_>,
    tree: &PyDraftTree,
    node_tokens: &Bound<'_, PyAny>,
    hidden: &Bound<'_, PyAny>,
    node_heads: &Bound<'_, PyAny>,
    bank: &PyHeadBank,
    params: &PySamplingParams,
    generator: &mut PyGenerator,
    draft_probs: Option<&Bound<'_, PyAny>>,
    draft_kind: &str,
) -> PyResult<PyVerifyResult> {
    let kind = verify::DraftKind::parse(draft_kind).map_err(value_error)?;
    let tokens = int32_array(node_tokens, "node_tokens")?;
    tokens.require_ndim("node_tokens", 1)?;
    let hid = array::<f32>(hidden, "hidden", "float32")?;
    hid.require_ndim("hidden", 2)?;
    let heads = array::<i64>(node_heads, "node_heads", "int64")?;
    let probs = draft_probs
        .map(|q| array::<f32>(q, "draft_probs", "float32"))
        .transpose()?;
    let (td, hd, headd) = (tokens.data()?, hid.data()?, heads.data()?);
    let qd = probs.as_ref().map(|q| q.data()).transpose()?;
    let bank = bank.inner.clone();
    let problem = TreeProblem {
        tree: &tree.inner,
        node_tokens: &td,
        target_logits: &[],
        draft_probs: qd.as_deref(),
        vocab: bank.vocab(),
        kind,
    };
    let rows = HiddenRows {
        hidden: &hd,
        heads: &headd,
        bank: &bank,
    };
    let p = crate::sampling::verify_params(params)?;
    let mut g = generator.inner;
    let r = run(py, || {
        verify::verify_tree_hidden(&problem, &rows, &p, &mut g)
    })?;
    generator.inner = g;
    Ok(PyVerifyResult::from_core(r, None))
}
