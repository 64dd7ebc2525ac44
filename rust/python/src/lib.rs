//! Thin PyO3 layer over codecspec-core: converts numpy arrays to slices, releases the GIL
//! around the work, and maps core errors to ValueError. No algorithm lives here.

use pyo3::prelude::*;

mod convert;
mod sampling;
mod tree;
mod verify;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<sampling::PySamplingParams>()?;
    m.add_class::<sampling::PyGenerator>()?;
    m.add_class::<tree::PyDraftTree>()?;
    m.add_class::<verify::PyVerifyResult>()?;
    m.add_function(wrap_pyfunction!(sampling::warp, m)?)?;
    m.add_function(wrap_pyfunction!(sampling::sample, m)?)?;
    m.add_function(wrap_pyfunction!(sampling::topk, m)?)?;
    m.add_function(wrap_pyfunction!(verify::verify_chain, m)?)?;
    m.add_function(wrap_pyfunction!(verify::verify_tree, m)?)?;
    m.add_function(wrap_pyfunction!(verify::verify_tree_batch, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
