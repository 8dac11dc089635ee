//! Fuzzes the `acme` reader: arbitrary bytes must never panic, and what loads is consistent.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ordo_fuzz::check(data, ordo_trace::Format::Acme));
