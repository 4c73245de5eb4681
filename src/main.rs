//! agent-nvim: pick the front end, run it, report one error.

fn main() {}
