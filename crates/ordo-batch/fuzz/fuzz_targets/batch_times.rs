//! Fuzzes `--window`, `--tz` and deadline parsing: any text parses or is refused, and a window
//! that parses is open at the times it says it opens.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ordo_batch::deadline::Deadline;
use ordo_batch::window::Window;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = Deadline::parse(s);
    let (spec, tz) = s.split_once(' ').unwrap_or((s, "UTC"));
    if let Ok(w) = Window::parse(spec, Some(tz)) {
        let t: jiff::Timestamp = "2025-03-30T00:30:00Z".parse().expect("time");
        let o = w.next_open(t);
        assert!(w.is_open(o));
        assert!(w.closes_after(o) > o);
        assert!(w.advance_open(t, 3600.0) >= o);
    }
});
