//! Fuzzes Slurm's `--constraint` reader (`ordo_trace::Constraint`): arbitrary text must never
//! panic, and what reads is consistent: every node with all its features satisfies it, and a
//! feature it says every satisfying node has is one no satisfying node lacks.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ordo_trace::Constraint;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(Some(c)) = Constraint::parse(&text) else { return };
    let names = c.names();
    let required = c.required();
    assert!(required.iter().all(|f| names.contains(f)));
    assert!(c.holds(&|f| names.iter().any(|n| n == f)), "monotone: all features satisfy it");
    for f in &required {
        assert!(!c.holds(&|x| x != f && names.iter().any(|n| n == x)), "`{f}` required by `{text}`");
    }
    if c.is_conjunction() {
        assert!(c.holds(&|x| required.iter().any(|n| n == x)));
    }
});
