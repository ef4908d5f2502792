//! Drives each request end to end through `machine::request`.
