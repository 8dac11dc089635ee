//! Fuzzes the `ordo-db` reader (an `ordo server`'s SQLite database): damaged files and any
//! tables and rows must never panic, and what loads is consistent.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ordo_fuzz::check_db(data));
