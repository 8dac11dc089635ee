//! Fuzzes `ordo agent --config` files (`ordo_server::agent_file`): any text must give the
//! settings or an error naming the file (a line and a field where it can), never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = std::path::Path::new("agent.toml");
    match ordo_server::agent_file::AgentFile::parse(text, path) {
        Ok(f) => {
            // What was accepted is what the agent then reads.
            let _ = (f.gpus(), ordo_server::agent_file::text(&f.grace));
        }
        Err(e) => assert!(e.to_string().contains("agent.toml"), "an error without the file: {e}"),
    }
});
