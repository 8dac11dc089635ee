//! Fuzzes the `pai-2020` reader: four tables joined from arbitrary bytes (split at `0xff`) must
//! never panic, and what loads is consistent.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ordo_fuzz::check_pai(data));
