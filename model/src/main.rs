//! `custodian-model`: check or explore the models.
fn main() {}
