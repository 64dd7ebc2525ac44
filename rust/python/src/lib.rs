//! Thin PyO3 layer over codecspec-core: converts numpy arrays to slices, releases the GIL
//! around the work, and maps core errors to ValueError. No algorithm lives here.

use pyo3::prelude::*;

mod convert;
mod fsq;
mod groups;
mod heads;
mod kv;
mod ortops;
mod projection;
mod sampling;
mod tree;
mod verify;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<sampling::PySamplingParams>()?;
    m.add_class::<sampling::PyGenerator>()?;
    m.add_class::<tree::PyDraftTree>()?;
    m.add_class::<verify::PyVerifyResult>()?;
    m.add_class::<heads::PyHeadBank>()?;
    m.add_class::<projection::PyProjection>()?;
    m.add_function(wrap_pyfunction!(heads::verify_tree_hidden, m)?)?;
    m.add_function(wrap_pyfunction!(sampling::warp, m)?)?;
    m.add_function(wrap_pyfunction!(sampling::sample, m)?)?;
    m.add_function(wrap_pyfunction!(sampling::topk, m)?)?;
    m.add_function(wrap_pyfunction!(verify::verify_chain, m)?)?;
    m.add_function(wrap_pyfunction!(verify::verify_tree, m)?)?;
    m.add_function(wrap_pyfunction!(verify::verify_tree_batch, m)?)?;
    m.add_class::<groups::PyAcousticGroups>()?;
    m.add_function(wrap_pyfunction!(groups::verify_chain_coarse, m)?)?;
    m.add_function(wrap_pyfunction!(groups::verify_tree_coarse, m)?)?;
    m.add_function(wrap_pyfunction!(fsq::fsq_pack, m)?)?;
    m.add_function(wrap_pyfunction!(fsq::fsq_unpack, m)?)?;
    m.add_function(wrap_pyfunction!(fsq::sample_factorized, m)?)?;
    m.add_function(wrap_pyfunction!(fsq::sample_stop, m)?)?;
    m.add_function(wrap_pyfunction!(kv::kv_commit, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
