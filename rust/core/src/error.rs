//! One error type for the whole core: every failure names the argument it is about, so the
//! binding layer can turn it into a `ValueError` whose message a user can act on.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The public argument name (as the Python API spells it).
    pub arg: &'static str,
    pub msg: String,
}

impl Error {
    pub fn new(arg: &'static str, msg: impl Into<String>) -> Self {
        Self {
            arg,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.arg, self.msg)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand for early returns: `ensure(cond, "arg", || format!(..))?`.
#[inline]
pub fn ensure(cond: bool, arg: &'static str, msg: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(Error::new(arg, msg()))
    }
}
