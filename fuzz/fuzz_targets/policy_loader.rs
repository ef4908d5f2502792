// PLACEHOLDER: replaced by the area that owns this target.
#![no_main]
libfuzzer_sys::fuzz_target!(|_data: &[u8]| {});
