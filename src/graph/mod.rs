//! The tensor graph.
