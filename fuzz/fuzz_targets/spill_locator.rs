//! Fuzzes the spill locator parser: never panics, and whatever it accepts
//! prints back to exactly the same string (the format is canonical), holds
//! no traversal, and names a `<32 hex>.spill` file.
#![no_main]

use custodian::spill::Locator;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(loc) = Locator::parse(text) {
        assert_eq!(loc.to_string(), text, "accepted a non-canonical locator");
        let session = loc.session();
        assert!(!session.is_empty() && !session.starts_with('.'));
        assert!(!session.contains('/') && !session.contains('\0'));
        assert_eq!(Locator::parse(&loc.to_string()).as_ref(), Ok(&loc));
    }
});
