#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| wstune_fuzz::harness::inflate_isal(data));
