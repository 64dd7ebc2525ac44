//! Projection: y = x · W (+ b) on the calling thread, for the vocoders' fixed tables.

use codecspec_core::projection::{Projection, Real};
use numpy::{Element, PyArray1, PyArray2, PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::{arg_error, array, run};

enum Inner {
    F32(Projection<f32>),
    F64(Projection<f64>),
}

/// A dense linear map, weights [K, M] (x [n, K] -> y [n, M]) and an optional bias [M].
///
/// float64 weights make a float64 map, anything else a float32 one; inputs are converted to
/// the map's dtype. Runs on the caller's thread without numpy's BLAS (see the core module).
#[pyclass(name = "Projection", module = "codecspec._core", frozen)]
pub struct PyProjection {
    inner: Inner,
}

fn build<T: Real + Element>(
    py: Python<'_>,
    weights: &Bound<'_, PyAny>,
    bias: Option<&Bound<'_, PyAny>>,
    dtype: &str,
) -> PyResult<Projection<T>> {
    let w = array::<T>(weights, "weights", dtype)?;
    w.require_ndim("weights", 2)?;
    let (k, m) = (w.shape[0], w.shape[1]);
    let data = w.data()?.into_owned();
    let b = match bias {
        Some(b) => {
            let v = array::<T>(b, "bias", dtype)?;
            v.require_ndim("bias", 1)?;
            Some(v.data()?.into_owned())
        }
        None => None,
    };
    run(py, || Projection::new(data, k, m, b))
}

fn apply<'py, T: Real + Element>(
    py: Python<'py>,
    p: &Projection<T>,
    x: &Bound<'py, PyAny>,
    dtype: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let xa = array::<T>(x, "x", dtype)?;
    xa.require_ndim("x", 2)?;
    let (n, k) = (xa.shape[0], xa.shape[1]);
    if k != p.inputs() {
        return Err(arg_error(
            "x",
            format!(
                "expected rows of {} values, got shape [{n}, {k}]",
                p.inputs()
            ),
        ));
    }
    let data = xa.data()?;
    let out = PyArray2::<T>::zeros(py, [n, p.outputs()], false);
    let o = unsafe { out.as_slice_mut() }.expect("fresh array");
    if n > 0 {
        run(py, || p.apply_into(&data, o))?;
    }
    Ok(out.into_any())
}

/// (weights [K, M], bias [M] or None) as new numpy arrays.
fn tables<'py, T: Real + Element>(
    py: Python<'py>,
    p: &Projection<T>,
) -> PyResult<(Bound<'py, PyAny>, Option<Bound<'py, PyAny>>)> {
    let w = PyArray1::from_slice(py, p.weights())
        .reshape([p.inputs(), p.outputs()])?
        .into_any();
    let b = p.bias().map(|b| PyArray1::from_slice(py, b).into_any());
    Ok((w, b))
}

#[pymethods]
impl PyProjection {
    #[new]
    #[pyo3(signature = (weights, bias=None))]
    fn new(
        py: Python<'_>,
        weights: &Bound<'_, PyAny>,
        bias: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let inner = if weights.cast::<PyArrayDyn<f64>>().is_ok() {
            Inner::F64(build::<f64>(py, weights, bias, "float64")?)
        } else {
            Inner::F32(build::<f32>(py, weights, bias, "float32")?)
        };
        Ok(Self { inner })
    }

    /// y [n, M] = x [n, K] · weights (+ bias), in the map's dtype.
    fn apply<'py>(&self, py: Python<'py>, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match &self.inner {
            Inner::F32(p) => apply(py, p, x, "float32"),
            Inner::F64(p) => apply(py, p, x, "float64"),
        }
    }

    #[getter]
    fn in_features(&self) -> usize {
        match &self.inner {
            Inner::F32(p) => p.inputs(),
            Inner::F64(p) => p.inputs(),
        }
    }
    #[getter]
    fn out_features(&self) -> usize {
        match &self.inner {
            Inner::F32(p) => p.outputs(),
            Inner::F64(p) => p.outputs(),
        }
    }
    /// "float32" or "float64".
    #[getter]
    fn dtype(&self) -> &'static str {
        match &self.inner {
            Inner::F32(_) => "float32",
            Inner::F64(_) => "float64",
        }
    }

    /// Pickles as its tables (a codec holding maps can cross process boundaries).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let (w, b) = match &slf.get().inner {
            Inner::F32(p) => tables(py, p)?,
            Inner::F64(p) => tables(py, p)?,
        };
        let args = PyTuple::new(py, [w, b.unwrap_or_else(|| py.None().into_bound(py))])?;
        PyTuple::new(py, [slf.get_type().into_any(), args.into_any()])
    }

    fn __repr__(&self) -> String {
        format!(
            "Projection(in_features={}, out_features={}, dtype={})",
            self.in_features(),
            self.out_features(),
            self.dtype()
        )
    }
}
