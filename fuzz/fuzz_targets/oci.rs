#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rflux_fuzz::oci(data));
