//! numpy <-> slice conversion and error mapping shared by every binding.
//!
//! Arrays of the right dtype and layout are borrowed without copying; anything else that numpy
//! can convert is converted once. Failures become `ValueError`s that name the argument.

use std::borrow::Cow;
use std::panic::{catch_unwind, AssertUnwindSafe};

use numpy::{Element, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

pub fn value_error(e: codecspec_core::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

pub fn arg_error(arg: &str, msg: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{arg}: {msg}"))
}

/// Runs core work without the GIL; a panic (a bug) surfaces as RuntimeError, never unwinds
/// into the interpreter.
pub fn run<T: Send, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> codecspec_core::Result<T> + Send,
{
    py.detach(|| catch_unwind(AssertUnwindSafe(f)))
        .map_err(|p| {
            let what = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            PyRuntimeError::new_err(format!("codecspec internal error (please report): {what}"))
        })?
        .map_err(value_error)
}

/// A read-only view of an ndarray as a flat row-major slice plus its shape.
pub struct ArrayView<'py, T: Element> {
    arr: Bound<'py, PyArrayDyn<T>>,
    pub shape: Vec<usize>,
}

impl<'py, T: Element + Copy> ArrayView<'py, T> {
    /// Flat row-major data: borrowed when C-contiguous, copied otherwise.
    pub fn data(&self) -> PyResult<Cow<'_, [T]>> {
        // numpy's "contiguous" includes Fortran order, whose memory is not row-major: only a
        // C-contiguous array may be borrowed; anything else is copied in logical order.
        if self.arr.is_c_contiguous() {
            // Safety: the array is held for the view's lifetime and only read here.
            if let Ok(s) = unsafe { self.arr.as_slice() } {
                return Ok(Cow::Borrowed(s));
            }
        }
        Ok(Cow::Owned(
            self.arr.to_owned_array().iter().copied().collect(),
        ))
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Size of the last axis (0 for a scalar).
    pub fn last(&self) -> usize {
        self.shape.last().copied().unwrap_or(0)
    }

    pub fn require_ndim(&self, arg: &str, ndim: usize) -> PyResult<()> {
        if self.ndim() != ndim {
            return Err(arg_error(
                arg,
                format!("expected a {ndim}-d array, got shape {:?}", self.shape),
            ));
        }
        Ok(())
    }
}

/// Borrows `obj` as an ndarray of `T`, converting (numpy.asarray with the dtype) if needed.
/// `dtype` is numpy's name for `T`, used for the conversion and in messages.
pub fn array<'py, T: Element>(
    obj: &Bound<'py, PyAny>,
    arg: &str,
    dtype: &str,
) -> PyResult<ArrayView<'py, T>> {
    let arr = match obj.cast::<PyArrayDyn<T>>() {
        Ok(a) => a.clone(),
        Err(_) => {
            let np = obj.py().import("numpy")?;
            let converted = np
                .call_method1("asarray", (obj, dtype))
                .map_err(|e| arg_error(arg, format!("cannot convert to {dtype}: {e}")))?;
            converted
                .cast_into::<PyArrayDyn<T>>()
                .map_err(|_| arg_error(arg, format!("cannot convert to a {dtype} array")))?
        }
    };
    let shape = arr.shape().to_vec();
    Ok(ArrayView { arr, shape })
}

/// Integer input as int64: int64 arrays are borrowed; other integer (or bool) arrays and
/// sequences are converted; floats and other kinds are rejected rather than truncated.
pub fn int64_array<'py>(obj: &Bound<'py, PyAny>, arg: &str) -> PyResult<ArrayView<'py, i64>> {
    if obj.cast::<PyArrayDyn<i64>>().is_ok() {
        return array::<i64>(obj, arg, "int64");
    }
    let np = obj.py().import("numpy")?;
    let raw = np
        .call_method1("asarray", (obj,))
        .map_err(|e| arg_error(arg, format!("cannot convert to an integer array: {e}")))?;
    let kind: String = raw.getattr("dtype")?.getattr("kind")?.extract()?;
    let size: usize = raw.getattr("size")?.extract()?;
    if size > 0 && !matches!(kind.as_str(), "i" | "u" | "b") {
        return Err(arg_error(
            arg,
            format!("expected integers, got an array of dtype kind {kind:?}"),
        ));
    }
    if kind == "u" && size > 0 {
        let too_big: bool = raw
            .call_method0("max")?
            .gt(i64::MAX as u64)
            .map_err(|e| arg_error(arg, e))?;
        if too_big {
            return Err(arg_error(arg, "values must fit in int64"));
        }
    }
    array::<i64>(&raw, arg, "int64")
}

/// Integer input as int32: int32 arrays are borrowed; other integer input goes through
/// `int64_array` and is narrowed with a range check.
pub fn int32_array<'py>(obj: &Bound<'py, PyAny>, arg: &str) -> PyResult<ArrayView<'py, i32>> {
    if let Ok(a) = obj.cast::<PyArrayDyn<i32>>() {
        let shape = a.shape().to_vec();
        return Ok(ArrayView {
            arr: a.clone(),
            shape,
        });
    }
    let wide = int64_array(obj, arg)?;
    let narrowed: Vec<i32> = to_i32(&wide.data()?, arg)?;
    let out = numpy::PyArray1::from_vec(obj.py(), narrowed)
        .reshape(wide.shape.clone())?
        .into_any();
    array::<i32>(&out, arg, "int32")
}

/// int64 values narrowed to int32 with a range check naming the argument.
pub fn to_i32(v: &[i64], arg: &str) -> PyResult<Vec<i32>> {
    v.iter()
        .map(|&x| {
            i32::try_from(x).map_err(|_| arg_error(arg, format!("value {x} does not fit in int32")))
        })
        .collect()
}
