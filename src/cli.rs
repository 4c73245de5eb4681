//! Command-line front ends (stub).
