// PLACEHOLDER: replaced by the area that owns this benchmark.
fn main() {}
