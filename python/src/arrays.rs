//! numpy in and out. Inputs go through `numpy.asarray` (lists, numpy arrays of any float
//! width, anything with `__array__`) and are checked by kind and shape, naming the argument;
//! outputs are the Rust vectors handed to numpy without a copy (`PyArray::from_vec`, then a
//! reshape, which is a view).

use numpy::{
    Element, PyArray1, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::invalid;

/// `obj` as a numpy array of float32 (a float array of any width; integers and booleans are
/// refused, as `kinema generate`/`kinema plan` refuse them in an npz), with its shape.
pub fn floats(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<(Vec<usize>, Vec<f32>)> {
    let a = asarray(obj, name)?;
    if a.dtype().kind() != b'f' {
        return Err(invalid(format!(
            "{name}: expected floats, got an array of dtype {}",
            a.dtype()
        )));
    }
    let a = a.call_method1("astype", ("float32",))?;
    let a = a.downcast::<PyArrayDyn<f32>>()?.readonly();
    Ok((a.shape().to_vec(), a.as_array().iter().copied().collect()))
}

/// `obj` as a numpy array of int64 (booleans and integers; floats are refused), with its shape.
pub fn ints(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<(Vec<usize>, Vec<i64>)> {
    let a = asarray(obj, name)?;
    if !matches!(a.dtype().kind(), b'b' | b'i' | b'u') {
        return Err(invalid(format!(
            "{name}: expected booleans or integers, got an array of dtype {}",
            a.dtype()
        )));
    }
    let a = a.call_method1("astype", ("int64",))?;
    let a = a.downcast::<PyArrayDyn<i64>>()?.readonly();
    Ok((a.shape().to_vec(), a.as_array().iter().copied().collect()))
}

/// `obj` as flags: booleans, or integers that are all 0 or 1.
pub fn flags(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<(Vec<usize>, Vec<bool>)> {
    let (shape, v) = ints(obj, name)?;
    let v = v
        .iter()
        .enumerate()
        .map(|(i, &x)| match x {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(invalid(format!(
                "{name}[{i}] (flat) = {x}: expected 0 or 1"
            ))),
        })
        .collect::<PyResult<Vec<bool>>>()?;
    Ok((shape, v))
}

fn asarray<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyUntypedArray>> {
    let np = obj.py().import("numpy")?;
    let a = np.call_method1("asarray", (obj,)).map_err(|e| {
        invalid(format!(
            "{name}: not convertible to a numpy array ({})",
            e.value(obj.py())
        ))
    })?;
    Ok(a.downcast_into::<PyUntypedArray>()?)
}

/// Checks `shape` against `expected`, naming the argument.
pub fn check_shape(name: &str, shape: &[usize], expected: &[usize]) -> PyResult<()> {
    if shape != expected {
        return Err(invalid(format!(
            "{name} has shape {shape:?}, expected {expected:?}"
        )));
    }
    Ok(())
}

/// `values` as a numpy array of `shape`, without copying them.
pub fn array<'py, T: Element>(
    py: Python<'py>,
    values: Vec<T>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyArray1::from_vec(py, values)
        .reshape(shape.to_vec())?
        .into_any())
}

/// Puts `values` into `dict` under `key` as an array of `shape`.
pub fn put<T: Element>(
    dict: &Bound<'_, PyDict>,
    key: &str,
    values: Vec<T>,
    shape: &[usize],
) -> PyResult<()> {
    dict.set_item(key, array(dict.py(), values, shape)?)
}
