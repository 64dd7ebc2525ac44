//! SamplingParams, Generator, warp and sample.

use codecspec_core::{rng, warp as core_warp, SamplingParams as CoreParams};
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;

use crate::convert::{arg_error, array, int64_array, run, value_error, ArrayView};

/// `logits` as float32 rows [..., V] with V > 0.
fn logit_rows<'py>(logits: &Bound<'py, PyAny>) -> PyResult<ArrayView<'py, f32>> {
    let l = array::<f32>(logits, "logits", "float32")?;
    if l.ndim() == 0 || l.last() == 0 {
        return Err(arg_error(
            "logits",
            format!("expected shape [..., V] with V > 0, got {:?}", l.shape),
        ));
    }
    Ok(l)
}

/// Sampling parameters, applied in the order repetition penalty, temperature, top-k, top-p.
///
/// temperature 0 = greedy (argmax, lowest index on ties); top_k 0 = off; top_p 1 = off;
/// repetition_penalty 1 = off (it acts only where a `history` is passed to warp / sample).
/// Raises ValueError naming the field for temperature < 0 or non-finite, top_k < 0, top_p
/// outside (0, 1], or repetition_penalty <= 0 or non-finite.
#[pyclass(name = "SamplingParams", module = "codecspec._core", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PySamplingParams {
    pub inner: CoreParams,
}

#[pymethods]
impl PySamplingParams {
    #[new]
    #[pyo3(signature = (temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0))]
    fn new(temperature: f64, top_k: i64, top_p: f64, repetition_penalty: f64) -> PyResult<Self> {
        let inner = CoreParams::new(temperature as f32, top_k, top_p as f32)
            .and_then(|p| p.with_repetition_penalty(repetition_penalty as f32))
            .map_err(value_error)?;
        Ok(Self { inner })
    }

    #[getter]
    fn temperature(&self) -> f32 {
        self.inner.temperature
    }
    #[getter]
    fn top_k(&self) -> usize {
        self.inner.top_k
    }
    #[getter]
    fn top_p(&self) -> f32 {
        self.inner.top_p
    }
    #[getter]
    fn repetition_penalty(&self) -> f32 {
        self.inner.repetition_penalty
    }
    #[getter]
    fn greedy(&self) -> bool {
        self.inner.is_greedy()
    }

    fn __repr__(&self) -> String {
        let p = &self.inner;
        if p.has_penalty() {
            format!(
                "SamplingParams(temperature={}, top_k={}, top_p={}, repetition_penalty={})",
                p.temperature, p.top_k, p.top_p, p.repetition_penalty
            )
        } else {
            format!(
                "SamplingParams(temperature={}, top_k={}, top_p={})",
                p.temperature, p.top_k, p.top_p
            )
        }
    }
}

/// Counter-based random generator (Philox4x32-10) keyed by (seed, stream).
///
/// Every call that draws advances `step` by one; draws inside a call are addressed by
/// (step, node, slot), so results do not depend on batch composition or thread count.
#[pyclass(name = "Generator", module = "codecspec._core")]
#[derive(Clone)]
pub struct PyGenerator {
    pub inner: rng::Generator,
}

#[pymethods]
impl PyGenerator {
    #[new]
    #[pyo3(signature = (seed=None, stream=None))]
    fn new(seed: Option<&Bound<'_, PyAny>>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let seed = seed.map(|s| unsigned(s, "seed")).transpose()?.unwrap_or(0);
        let stream = stream
            .map(|s| unsigned(s, "stream"))
            .transpose()?
            .unwrap_or(0);
        Ok(Self {
            inner: rng::Generator::new(seed, stream),
        })
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed
    }
    #[getter]
    fn stream(&self) -> u64 {
        self.inner.stream
    }
    #[getter]
    fn step(&self) -> u64 {
        self.inner.step
    }

    /// An independent generator for stream `stream_id` (its step starts at 0).
    fn fork(&self, stream_id: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Self {
            inner: self.inner.fork(unsigned(stream_id, "stream_id")?),
        })
    }

    /// A generator in the same state; drawing from it leaves this one untouched.
    fn copy(&self) -> Self {
        self.clone()
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    /// `n` uniforms in (0, 1] (float64); advances `step` by one.
    fn random<'py>(&mut self, py: Python<'py>, n: i64) -> PyResult<Bound<'py, PyArray1<f64>>> {
        if n < 0 {
            return Err(arg_error("n", format!("must be >= 0, got {n}")));
        }
        let s = self.inner.next_step();
        let v: Vec<f64> = (0..n as u64)
            .map(|i| s.uniform(i as u32, (i >> 32) as u32))
            .collect();
        Ok(PyArray1::from_vec(py, v))
    }

    fn __repr__(&self) -> String {
        format!(
            "Generator(seed={}, stream={}, step={})",
            self.inner.seed, self.inner.stream, self.inner.step
        )
    }
}

/// A Python int in [0, 2^64) (seeds and stream ids), else ValueError naming `arg`.
fn unsigned(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<u64> {
    obj.extract::<u64>()
        .map_err(|_| arg_error(arg, format!("must be an integer in [0, 2**64), got {obj}")))
}

/// `history` as a flat int64 list of earlier token ids (None = empty).
fn history_ids(history: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<i64>> {
    match history {
        None => Ok(Vec::new()),
        Some(h) if h.is_none() => Ok(Vec::new()),
        Some(h) => {
            let a = int64_array(h, "history")?;
            if a.ndim() > 1 {
                return Err(arg_error(
                    "history",
                    format!("expected a 1-D array of token ids, got shape {:?}", a.shape),
                ));
            }
            Ok(a.data()?.into_owned())
        }
    }
}

/// Parameters for the calls that take no history (verification, factorized sampling): a
/// repetition penalty there would be silently ignored, so it is refused.
pub fn verify_params(params: &PySamplingParams) -> PyResult<CoreParams> {
    if params.inner.has_penalty() {
        return Err(arg_error(
            "params",
            "repetition_penalty != 1 is supported by warp / sample (with history) only",
        ));
    }
    Ok(params.inner)
}

/// Warped probabilities: float32 with the shape of `logits` ([..., V]).
///
/// `logits` may hold -inf; NaN, +inf, or a row with no finite entry raise ValueError. With
/// `history` (earlier token ids of this stream) the repetition penalty applies first.
#[pyfunction]
#[pyo3(signature = (logits, params, history=None))]
pub fn warp<'py>(
    py: Python<'py>,
    logits: &Bound<'py, PyAny>,
    params: &PySamplingParams,
    history: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let l = logit_rows(logits)?;
    let hist = history_ids(history)?;
    let data = l.data()?;
    let out = PyArrayDyn::<f32>::zeros(py, l.shape.clone(), false);
    {
        let mut w = out.readwrite();
        let o = w.as_slice_mut().expect("fresh array is contiguous");
        let (v, p) = (l.last(), params.inner);
        run(py, || core_warp::warp_dense_history(&data, v, &p, &hist, o))?;
    }
    Ok(out)
}

/// One token per row of `logits` [..., V] → int32 [...]. Advances the generator by one step
/// unless greedy. With `history` the repetition penalty applies first.
#[pyfunction]
#[pyo3(signature = (logits, params, generator, history=None))]
pub fn sample<'py>(
    py: Python<'py>,
    logits: &Bound<'py, PyAny>,
    params: &PySamplingParams,
    generator: &mut PyGenerator,
    history: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArrayDyn<i32>>> {
    let l = logit_rows(logits)?;
    let hist = history_ids(history)?;
    let data = l.data()?;
    let lead = l.shape[..l.ndim() - 1].to_vec();
    let out = PyArrayDyn::<i32>::zeros(py, lead, false);
    {
        let mut w = out.readwrite();
        let o = w.as_slice_mut().expect("fresh array is contiguous");
        let (v, p) = (l.last(), params.inner);
        let mut g = generator.inner;
        run(py, || {
            core_warp::sample_rows_history(&data, v, &p, &hist, &mut g, o)
        })?;
        generator.inner = g;
    }
    Ok(out)
}

/// The k highest-logit token ids of each row of `logits` [..., V] → int32 [..., k], best first
/// (ties → lowest index). These are the deterministic children of a top-k draft tree.
#[pyfunction]
pub fn topk<'py>(
    py: Python<'py>,
    logits: &Bound<'py, PyAny>,
    k: i64,
) -> PyResult<Bound<'py, PyArrayDyn<i32>>> {
    let l = logit_rows(logits)?;
    if k < 1 || k as usize > l.last() {
        return Err(arg_error(
            "k",
            format!("must be in [1, V = {}], got {k}", l.last()),
        ));
    }
    let data = l.data()?;
    let mut shape = l.shape.clone();
    *shape.last_mut().unwrap() = k as usize;
    let out = PyArrayDyn::<i32>::zeros(py, shape, false);
    {
        let mut w = out.readwrite();
        let o = w.as_slice_mut().expect("fresh array is contiguous");
        let v = l.last();
        run(py, || core_warp::top_k_rows(&data, v, k as usize, o))?;
    }
    Ok(out)
}
