#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| jobenv::fuzzing::escaped_redaction(data));
