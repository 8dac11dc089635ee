//! Fuzzes speed matrix files (`--speeds`, `ordo_trace::parse_speeds`): any text must give a
//! matrix of finite speeds above 0 or an error naming the file, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match ordo_trace::parse_speeds(text, "speeds.toml") {
        Ok(s) => {
            for class in s.classes() {
                for m in ["a100", "v100", "t4"] {
                    let v = s.of(Some(class.as_str()), Some(m));
                    assert!(v.is_finite() && v > 0.0, "speed {v} of {class} on {m}");
                }
            }
            let _ = s.check_models(&["a100".to_string()]);
        }
        Err(e) => assert!(e.to_string().starts_with("speeds.toml:"), "an error without the file: {e}"),
    }
});
