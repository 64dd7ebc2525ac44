//! kv_commit: moves the accepted path's K/V rows into a host-owned cache, in place.

use std::borrow::Cow;

use codecspec_core::kv::{kv_commit_inplace, kv_commit_rows};
use half::f16;
use numpy::{BorrowError, Element, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::convert::{arg_error, int32_array, run};

/// Commits an accepted path to a fixed-capacity KV cache, in place; returns the new length
/// past_len + len(nodes).
///
/// cache: float32 or float16 numpy array [..., capacity, D], C-contiguous and writeable (it is
/// modified in place; nothing is copied). nodes: strictly increasing int node indices of the
/// verify call's query rows (include the root 0).
/// - rows None: the verify call's rows already sit at cache[..., past_len + i, :] for node i;
///   the row of nodes[j] moves to cache[..., past_len + j, :].
/// - rows [..., T, D] (same leading dims and D; converted to the cache's dtype if needed, and
///   must not share memory with cache): cache[..., past_len + j, :] = rows[..., nodes[j], :].
///
/// Raises ValueError naming `cache` (wrong dtype, fewer than 2 dims, not C-contiguous, not
/// writeable), `past_len` (negative or > capacity), `nodes` (not strictly increasing, out of
/// range, or past_len + len(nodes) > capacity) or `rows` (shape mismatch, shares memory with
/// cache).
#[pyfunction]
#[pyo3(signature = (cache, past_len, nodes, rows=None))]
pub fn kv_commit(
    py: Python<'_>,
    cache: &Bound<'_, PyAny>,
    past_len: i64,
    nodes: &Bound<'_, PyAny>,
    rows: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    if past_len < 0 {
        return Err(arg_error(
            "past_len",
            format!("must be >= 0, got {past_len}"),
        ));
    }
    let n = int32_array(nodes, "nodes")?;
    n.require_ndim("nodes", 1)?;
    let nd = n.data()?;
    let past = past_len as usize;
    if let Ok(c) = cache.cast::<PyArrayDyn<f32>>() {
        commit(py, c, past, &nd, rows, "float32")
    } else if let Ok(c) = cache.cast::<PyArrayDyn<f16>>() {
        commit(py, c, past, &nd, rows, "float16")
    } else {
        let what = match cache.getattr("dtype") {
            Ok(d) => format!("an array of dtype {d}"),
            Err(_) => format!("{}", cache.get_type()),
        };
        Err(arg_error(
            "cache",
            format!("expected a float32 or float16 numpy array (updated in place), got {what}"),
        ))
    }
}

fn commit<T: Element + Copy + Send + Sync>(
    py: Python<'_>,
    cache: &Bound<'_, PyArrayDyn<T>>,
    past_len: usize,
    nodes: &[i32],
    rows: Option<&Bound<'_, PyAny>>,
    dtype: &str,
) -> PyResult<usize> {
    let shape = cache.shape().to_vec();
    let nd = shape.len();
    if nd < 2 {
        return Err(arg_error(
            "cache",
            format!("expected shape [..., capacity, D], got {shape:?}"),
        ));
    }
    if !cache.is_c_contiguous() {
        return Err(arg_error(
            "cache",
            "must be C-contiguous (it is updated in place; a copy would be lost)",
        ));
    }
    let mut rw = cache.try_readwrite().map_err(|e| match e {
        BorrowError::NotWriteable => arg_error("cache", "must be writeable"),
        _ => arg_error("cache", "is already borrowed elsewhere"),
    })?;
    let slice = rw
        .as_slice_mut()
        .map_err(|e| arg_error("cache", format!("cannot be viewed as a flat slice: {e}")))?;
    let outer: usize = shape[..nd - 2].iter().product();
    let (capacity, inner) = (shape[nd - 2], shape[nd - 1]);
    let Some(rows) = rows else {
        return run(py, || {
            kv_commit_inplace(slice, outer, capacity, inner, past_len, nodes)
        });
    };
    let r: Bound<'_, PyArrayDyn<T>> = match rows.cast::<PyArrayDyn<T>>() {
        Ok(a) => a.clone(),
        Err(_) => {
            let np = py.import("numpy")?;
            np.call_method1("asarray", (rows, dtype))
                .map_err(|e| arg_error("rows", format!("cannot convert to {dtype}: {e}")))?
                .cast_into::<PyArrayDyn<T>>()
                .map_err(|_| arg_error("rows", format!("cannot convert to a {dtype} array")))?
        }
    };
    let rshape = r.shape().to_vec();
    if rshape.len() != nd || rshape[..nd - 2] != shape[..nd - 2] || rshape[nd - 1] != inner {
        let lead: Vec<String> = shape[..nd - 2].iter().map(|d| d.to_string()).collect();
        return Err(arg_error(
            "rows",
            format!(
                "expected shape [{}T, {inner}] (the cache's leading dims and D), got {rshape:?}",
                lead.iter().map(|d| format!("{d}, ")).collect::<String>()
            ),
        ));
    }
    let t = rshape[nd - 2];
    let ro = r
        .try_readonly()
        .map_err(|_| arg_error("rows", "must not share memory with cache"))?;
    let data: Cow<'_, [T]> = match ro.as_slice() {
        Ok(s) if r.is_c_contiguous() => Cow::Borrowed(s),
        _ => Cow::Owned(ro.as_array().iter().copied().collect()),
    };
    run(py, || {
        kv_commit_rows(slice, outer, capacity, inner, past_len, &data, t, nodes)
    })
}
