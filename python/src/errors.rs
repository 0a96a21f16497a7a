//! `kinema::Error` as Python exceptions. The classes live in `kinema/_errors.py` (one of
//! them derives from both `RuntimeError` and `ValueError`, which PyO3's exception macros
//! cannot declare); the message is the Rust error's text, unchanged.

use pyo3::PyErr;

pyo3::import_exception!(kinema._errors, KinemaError);
pyo3::import_exception!(kinema._errors, InvalidArgumentError);
pyo3::import_exception!(kinema._errors, Cancelled);

/// The Python exception for a Rust error: `Cancelled` for a cancel, `InvalidArgumentError`
/// (a `ValueError` too) for a bad argument, shape or dtype, `KinemaError` for the rest.
pub fn to_py(e: kinema::Error) -> PyErr {
    let msg = e.to_string();
    match e {
        kinema::Error::Cancelled { .. } => Cancelled::new_err(msg),
        kinema::Error::InvalidArgument(_) | kinema::Error::Shape(_) | kinema::Error::DType(_) => {
            InvalidArgumentError::new_err(msg)
        }
        _ => KinemaError::new_err(msg),
    }
}

/// A bad argument found by the binding itself, before any Rust call.
pub fn invalid(msg: impl Into<String>) -> PyErr {
    InvalidArgumentError::new_err(msg.into())
}
