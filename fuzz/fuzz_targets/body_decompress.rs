//! Any compressed body, as a pull hands it to a consumer: zlib, LZ4 and ZSTD decoding
//! refuse or inflate, never panic, and never return more than the bound; what they return
//! compresses and inflates back to itself. A pulled body of records around it decodes
//! record by record, the undecodable ones named, never panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_shell::message::{Compression, decode_pulled_each};

/// Small, so a body that inflates far beyond its size is refused quickly.
const BOUND: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    for kind in [Compression::Zlib, Compression::Lz4, Compression::Zstd] {
        if let Ok(plain) = kind.decompress(data, BOUND) {
            assert!(plain.len() <= BOUND);
            let again = kind.compress(&plain, 1).expect("compressing what inflated");
            assert_eq!(kind.decompress(&again, BOUND).as_deref(), Ok(&plain[..]));
        }
    }
    if let Ok(each) = decode_pulled_each(data, false) {
        for r in each {
            match r {
                Ok(m) => assert!(m.body.len() <= tern_shell::message::MAX_INFLATED_BYTES),
                Err(u) => assert!(!u.error.to_string().is_empty()),
            }
        }
    }
});
