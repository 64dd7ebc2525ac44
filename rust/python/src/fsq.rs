//! FSQ packing, factorized (multi-head) sampling and the stop head.

use codecspec_core::fsq as core_fsq;
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;

use crate::convert::{arg_error, array, int64_array, run};
use crate::sampling::{PyGenerator, PySamplingParams};

/// FSQ levels: any sequence of ints, each converted with a range check naming `levels`.
fn levels_u32(levels: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let l = int64_array(levels, "levels")?;
    l.require_ndim("levels", 1)?;
    let data = l.data()?;
    data.iter()
        .enumerate()
        .map(|(i, &x)| {
            u32::try_from(x).map_err(|_| {
                arg_error(
                    "levels",
                    format!("level {i} is {x}; every level must be >= 2"),
                )
            })
        })
        .collect()
}

fn reshaped_i64<'py>(
    py: Python<'py>,
    v: Vec<i64>,
    shape: Vec<usize>,
) -> PyResult<Bound<'py, PyArrayDyn<i64>>> {
    PyArray1::from_vec(py, v).reshape(shape)
}

/// Packs FSQ channels [..., L] (integers, 0 <= c_i < levels[i]) into int64 codes [...]:
/// mixed radix with the first level most significant (levels [8, 7, 6, 6] → codes in
/// [0, 2016)). Raises ValueError naming `channels` (last axis != L, a channel out of range,
/// non-integers) or `levels` (empty, a level < 2, product > 2^40).
#[pyfunction]
pub fn fsq_pack<'py>(
    py: Python<'py>,
    channels: &Bound<'py, PyAny>,
    levels: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArrayDyn<i64>>> {
    let lv = levels_u32(levels)?;
    let c = int64_array(channels, "channels")?;
    if c.ndim() == 0 || c.last() != lv.len() {
        return Err(arg_error(
            "channels",
            format!(
                "expected shape [..., {}] (one entry per level), got {:?}",
                lv.len(),
                c.shape
            ),
        ));
    }
    let data = c.data()?;
    let out = run(py, || core_fsq::fsq_pack(&data, &lv))?;
    reshaped_i64(py, out, c.shape[..c.ndim() - 1].to_vec())
}

/// Inverse of fsq_pack: int64 codes [...] in [0, Π levels) → int64 channels [..., L].
/// Raises ValueError naming `packed` (out of range, non-integers) or `levels`.
#[pyfunction]
pub fn fsq_unpack<'py>(
    py: Python<'py>,
    packed: &Bound<'py, PyAny>,
    levels: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArrayDyn<i64>>> {
    let lv = levels_u32(levels)?;
    let p = int64_array(packed, "packed")?;
    let data = p.data()?;
    let out = run(py, || core_fsq::fsq_unpack(&data, &lv))?;
    let mut shape = p.shape.clone();
    shape.push(lv.len());
    reshaped_i64(py, out, shape)
}

/// Samples C independent categorical heads laid side by side: logits [..., Σ head_sizes]
/// (float32) → int32 [..., C], each entry a class index within its head. Every head is warped
/// with `params` (temperature, top-k, top-p) and sampled; one generator step per call (draw
/// (row·C + head)), none when greedy. Raises ValueError naming `head_sizes` (empty or a size
/// < 1) or `logits` (last axis != Σ head_sizes, NaN/+inf, a head with no finite entry).
#[pyfunction]
pub fn sample_factorized<'py>(
    py: Python<'py>,
    logits: &Bound<'py, PyAny>,
    head_sizes: Vec<i64>,
    params: &PySamplingParams,
    generator: &mut PyGenerator,
) -> PyResult<Bound<'py, PyArrayDyn<i32>>> {
    let sizes: Vec<usize> = head_sizes
        .iter()
        .enumerate()
        .map(|(h, &s)| {
            if s < 1 || s > i32::MAX as i64 {
                Err(arg_error(
                    "head_sizes",
                    format!("head {h} has size {s}; sizes must be in [1, 2^31)"),
                ))
            } else {
                Ok(s as usize)
            }
        })
        .collect::<PyResult<_>>()?;
    let l = array::<f32>(logits, "logits", "float32")?;
    let width: usize = sizes.iter().sum();
    if l.ndim() == 0 || l.last() != width {
        return Err(arg_error(
            "logits",
            format!(
                "expected shape [..., {width}] (Σ head_sizes), got {:?}",
                l.shape
            ),
        ));
    }
    let data = l.data()?;
    let p = crate::sampling::verify_params(params)?;
    let mut g = generator.inner;
    let out = run(py, || {
        core_fsq::sample_factorized(&data, &sizes, &p, &mut g)
    })?;
    generator.inner = g;
    let mut shape = l.shape[..l.ndim() - 1].to_vec();
    shape.push(sizes.len());
    PyArray1::from_vec(py, out).reshape(shape)
}

/// Stop decisions: bool array with the shape of stop_logits, entry i ~
/// Bernoulli(sigmoid(stop_logits[i] / temperature)). temperature 0 → logit > 0 (no draw);
/// otherwise one generator step per call. ±inf logits mean always / never. Raises ValueError
/// naming `stop_logits` (NaN) or `temperature` (negative or not finite).
#[pyfunction]
#[pyo3(signature = (stop_logits, generator, temperature=1.0))]
pub fn sample_stop<'py>(
    py: Python<'py>,
    stop_logits: &Bound<'py, PyAny>,
    generator: &mut PyGenerator,
    temperature: f64,
) -> PyResult<Bound<'py, PyArrayDyn<bool>>> {
    let l = array::<f32>(stop_logits, "stop_logits", "float32")?;
    let data = l.data()?;
    let t = temperature as f32;
    if temperature.is_finite() && !t.is_finite() {
        return Err(arg_error(
            "temperature",
            format!("{temperature} does not fit in float32"),
        ));
    }
    let mut g = generator.inner;
    let out = run(py, || core_fsq::sample_stop(&data, t, &mut g))?;
    generator.inner = g;
    PyArray1::from_vec(py, out).reshape(l.shape.clone())
}
