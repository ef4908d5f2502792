//! Spill sweep benchmark (placeholder until measured).
fn main() {}
