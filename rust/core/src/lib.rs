//! codecspec-core: the sampling, tree and verification engine behind codecspec.
//!
//! Pure Rust with no Python or ONNX knowledge: every function takes slices and returns a
//! result or an [`Error`] that names the offending argument.

pub mod error;
pub mod rng;
pub mod tree;
pub mod verify;
pub mod warp;

pub use error::{Error, Result};
pub use rng::Generator;
pub use tree::{GreedyOptions, RankCap, Tree};
pub use verify::{verify_chain, verify_tree, verify_tree_batch, DraftKind, TreeProblem, Verified};
pub use warp::{Dist, SamplingParams};
