//! Fuzzes the ownership journal reader: never panics, the verified prefix
//! re-encodes to exactly the bytes it was read from (nothing past the first
//! unproven frame is interpreted), and replay never panics on it.
#![no_main]

use custodian::workspace::journal::{self, Tail};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let r = journal::read(data);
    assert!(r.valid_len <= data.len());
    let mut again = Vec::new();
    for rec in &r.records {
        journal::encode(rec, &mut again);
    }
    assert_eq!(
        again,
        data[..r.valid_len],
        "accepted bytes encode() never wrote"
    );
    match r.tail {
        Tail::Clean => assert_eq!(r.valid_len, data.len()),
        Tail::Torn { offset } | Tail::Corrupt { offset } => {
            assert_eq!(offset, r.valid_len);
            assert!(offset < data.len());
        }
    }
    let _ = journal::replay(&r);
});
