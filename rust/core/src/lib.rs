//! codecspec-core: the sampling, tree and verification engine behind codecspec.
//!
//! Pure Rust with no Python or ONNX knowledge: every function takes slices and returns a
//! result or an [`Error`] that names the offending argument.

pub mod attention;
pub mod coarse_tree;
pub mod error;
pub mod fsq;
pub mod groups;
pub mod heads;
pub mod kv;
pub mod projection;
pub mod rng;
pub mod routing;
pub mod snake;
pub mod tree;
pub mod verify;
pub mod warp;

pub use attention::{placed_attention, AttentionShape};
pub use coarse_tree::{verify_tree_coarse, RowGroups};
pub use error::{Error, Result};
pub use fsq::{fsq_pack, fsq_unpack, sample_factorized, sample_stop};
pub use groups::{verify_chain_coarse, AcousticGroups};
pub use heads::HeadBank;
pub use kv::{kv_commit_inplace, kv_commit_rows};
pub use projection::Projection;
pub use rng::Generator;
pub use routing::{merge_rows, pair_heads, route_rows, rows_per_head, PADDING};
pub use snake::{snake_beta, snake_beta_row};
pub use tree::{GreedyOptions, RankCap, Tree};
pub use verify::{
    verify_chain, verify_chain_tolerant, verify_tree, verify_tree_batch, verify_tree_hidden,
    DraftKind, HiddenRows, TreeProblem, Verified,
};
pub use warp::{Dist, SamplingParams};

/// Test support shared by the statistical tests: a per-cell law check and its broken variants'
/// counterpart (a test asserts `law_ok` for the real sampler and `!law_ok` for a broken one).
#[cfg(test)]
pub(crate) mod testlaw {
    /// Whether `counts` agree with `law` cell by cell: within 6 binomial sigmas (+5 for tiny
    /// cells) where the law is positive, and exactly zero outside its support.
    pub fn law_ok(counts: &[usize], law: &[f64]) -> bool {
        assert_eq!(counts.len(), law.len());
        let n = counts.iter().sum::<usize>() as f64;
        counts.iter().zip(law).all(|(&c, &p)| {
            if p <= 0.0 {
                return c == 0;
            }
            let tol = 6.0 * (n * p * (1.0 - p)).sqrt() + 5.0;
            (c as f64 - p * n).abs() <= tol
        })
    }
}
