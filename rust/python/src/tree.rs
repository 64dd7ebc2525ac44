//! DraftTree: rank-path trees, greedy construction, masks for the verify call.

use codecspec_core::tree::{GreedyOptions, RankCap, Tree, MAX_RANK};
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::convert::{arg_error, array, value_error};

/// A sparse draft tree. Node 0 is the root (the last committed token); node order is
/// (depth, rank path lexicographically), so parents[i] < i and siblings come in rank order.
#[pyclass(name = "DraftTree", module = "codecspec._core", frozen, eq)]
#[derive(PartialEq)]
pub struct PyDraftTree {
    pub inner: Tree,
}

fn accept_matrix(accept: &Bound<'_, PyAny>) -> PyResult<(Vec<f64>, usize, usize)> {
    let a = array::<f64>(accept, "accept", "float64")?;
    a.require_ndim("accept", 2)?;
    let (k, m) = (a.shape[0], a.shape[1]);
    Ok((a.data()?.into_owned(), k, m))
}

fn i32_vec<'py>(py: Python<'py>, v: &[i32]) -> Bound<'py, PyArray1<i32>> {
    PyArray1::from_slice(py, v)
}

#[pymethods]
impl PyDraftTree {
    /// Tree from rank paths in any order, e.g. [(0,), (1,), (0, 0)]. ValueError (naming
    /// `paths`) for empty or negative paths, duplicates, or a set that is not ancestor-closed.
    #[staticmethod]
    fn from_paths(paths: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut out = Vec::new();
        for (i, item) in paths.try_iter()?.enumerate() {
            let p: Vec<i64> = item?
                .extract()
                .map_err(|_| arg_error("paths", format!("path {i} is not a sequence of ints")))?;
            let p: Vec<u32> = p
                .iter()
                .map(|&r| {
                    if (0..=MAX_RANK as i64).contains(&r) {
                        Ok(r as u32)
                    } else {
                        Err(arg_error(
                            "paths",
                            format!("path {i} has rank {r} outside [0, {MAX_RANK}]"),
                        ))
                    }
                })
                .collect::<PyResult<_>>()?;
            out.push(p);
        }
        Ok(Self {
            inner: Tree::from_paths(out).map_err(value_error)?,
        })
    }

    /// A chain of k drafts.
    #[staticmethod]
    fn chain(k: i64) -> PyResult<Self> {
        if k < 0 {
            return Err(arg_error("k", format!("must be >= 0, got {k}")));
        }
        Ok(Self {
            inner: Tree::chain(k as usize).map_err(value_error)?,
        })
    }

    /// Greedy best-first tree with `budget` nodes maximising Σ Π accept[depth-1, rank] along
    /// each node's path. accept: [K, M] in [0, 1]. max_depth caps depth (default K); max_rank
    /// caps ranks (an int, or one int per depth). ValueError if fewer than `budget` nodes fit.
    #[staticmethod]
    #[pyo3(signature = (accept, budget, max_depth=None, max_rank=None))]
    fn greedy(
        accept: &Bound<'_, PyAny>,
        budget: i64,
        max_depth: Option<i64>,
        max_rank: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let (a, k, m) = accept_matrix(accept)?;
        if budget < 0 {
            return Err(arg_error("budget", format!("must be >= 0, got {budget}")));
        }
        if let Some(d) = max_depth {
            if d < 0 {
                return Err(arg_error("max_depth", format!("must be >= 0, got {d}")));
            }
        }
        let max_rank = match max_rank {
            None => RankCap::None,
            Some(obj) => {
                if let Ok(r) = obj.extract::<i64>() {
                    RankCap::All(nonneg(r)?)
                } else {
                    let v: Vec<i64> = obj.extract().map_err(|_| {
                        arg_error("max_rank", "expected an int or a sequence of ints")
                    })?;
                    RankCap::PerDepth(v.into_iter().map(nonneg).collect::<PyResult<_>>()?)
                }
            }
        };
        let opts = GreedyOptions {
            budget: budget as usize,
            max_depth: max_depth.map(|d| d as usize),
            max_rank,
        };
        Ok(Self {
            inner: Tree::greedy(&a, k, m, &opts).map_err(value_error)?,
        })
    }

    /// Tree from `to_json` output.
    #[staticmethod]
    fn from_json(py: Python<'_>, s: &str) -> PyResult<Self> {
        let obj = py
            .import("json")?
            .call_method1("loads", (s,))
            .map_err(|e| arg_error("s", format!("not valid JSON: {e}")))?;
        let paths = obj
            .get_item("paths")
            .map_err(|_| arg_error("s", "JSON object has no 'paths'"))?;
        if let Ok(fmt) = obj.get_item("format") {
            let f: String = fmt.extract().unwrap_or_default();
            if f != "codecspec.tree" {
                return Err(arg_error(
                    "s",
                    format!("format is {f:?}, expected 'codecspec.tree'"),
                ));
            }
        }
        Self::from_paths(&paths)
    }

    fn to_json(&self) -> String {
        self.inner.to_json()
    }

    #[getter]
    fn num_nodes(&self) -> usize {
        self.inner.num_nodes()
    }
    fn __len__(&self) -> usize {
        self.inner.num_nodes()
    }
    #[getter]
    fn max_depth(&self) -> usize {
        self.inner.max_depth()
    }
    #[getter]
    fn parents<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        i32_vec(py, self.inner.parents())
    }
    #[getter]
    fn depths<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        i32_vec(py, self.inner.depths())
    }
    #[getter]
    fn ranks<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        i32_vec(py, self.inner.ranks())
    }
    /// Rank paths of nodes 1..T-1 in node order.
    #[getter]
    fn paths<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = self
            .inner
            .paths()
            .iter()
            .map(|p| PyTuple::new(py, p))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Children of node `i` in rank order.
    fn children(&self, i: i64) -> PyResult<Vec<usize>> {
        let t = self.inner.num_nodes() as i64;
        if !(0..t).contains(&i) {
            return Err(arg_error("i", format!("node {i} outside [0, {t})")));
        }
        Ok(self.inner.children(i as usize).collect())
    }

    /// 1 + Σ over nodes of Π accept along the node's path. accept: [K, M].
    fn expected_tokens(&self, accept: &Bound<'_, PyAny>) -> PyResult<f64> {
        let (a, k, m) = accept_matrix(accept)?;
        self.inner.expected_tokens(&a, k, m).map_err(value_error)
    }

    /// bool [T, T]: entry (i, j) is true iff j is i or an ancestor of i.
    fn ancestor_mask<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<bool>> {
        let t = self.inner.num_nodes();
        let out = PyArray2::<bool>::zeros(py, [t, t], false);
        self.inner
            .fill_ancestor_mask(unsafe { out.as_slice_mut() }.expect("fresh array"));
        out
    }

    /// float32 [T, past_len + T]: 0 where visible (every past row, self, ancestors), -inf else.
    fn attention_bias<'py>(
        &self,
        py: Python<'py>,
        past_len: i64,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let p = nonneg_named(past_len, "past_len")?;
        let t = self.inner.num_nodes();
        let out = PyArray2::<f32>::zeros(py, [t, p + t], false);
        self.inner
            .fill_attention_bias(p, unsafe { out.as_slice_mut() }.expect("fresh array"));
        Ok(out)
    }

    /// int64 [T]: past_len + depth.
    fn position_ids<'py>(
        &self,
        py: Python<'py>,
        past_len: i64,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let p = nonneg_named(past_len, "past_len")?;
        let out = PyArray1::<i64>::zeros(py, self.inner.num_nodes(), false);
        self.inner.fill_position_ids(
            p as i64,
            unsafe { out.as_slice_mut() }.expect("fresh array"),
        );
        Ok(out)
    }

    /// int32 [L, max_depth + 1]: root-to-leaf node ids per leaf (node order), -1 padded.
    fn leaf_paths<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<i32>> {
        let l = self.inner.leaves().len();
        let out = PyArray2::<i32>::zeros(py, [l, self.inner.max_depth() + 1], false);
        self.inner
            .fill_leaf_paths(unsafe { out.as_slice_mut() }.expect("fresh array"));
        out
    }

    fn __repr__(&self) -> String {
        format!(
            "DraftTree(num_nodes={}, max_depth={})",
            self.inner.num_nodes(),
            self.inner.max_depth()
        )
    }
}

fn nonneg(r: i64) -> PyResult<usize> {
    nonneg_named(r, "max_rank")
}

fn nonneg_named(v: i64, arg: &str) -> PyResult<usize> {
    usize::try_from(v).map_err(|_| arg_error(arg, format!("must be >= 0, got {v}")))
}
