//! Bounded child processes (stub: being written).
