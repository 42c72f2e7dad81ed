//! The policy file and envoyproxy/ratelimit configuration parsers: any text is either loaded
//! or refused with located errors, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::Policies;
use tollgate_envoy::rls::RlsConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(errors) = Policies::from_yaml("fuzz.yaml", text) {
        assert!(!errors.0.is_empty(), "a refusal names at least one problem");
    }
    if let Err(errors) = RlsConfig::from_documents(&[("fuzz.yaml", text)]) {
        assert!(!errors.0.is_empty(), "a refusal names at least one problem");
    }
});
