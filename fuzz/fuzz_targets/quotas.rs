//! Fuzzes quota files (`--quotas`, `ordo_trace::parse_quotas`), limits by GPU model included:
//! any text must give a checked table or an error naming the file, never a panic; a checked
//! table resolves against a typed cluster or says which field names a model it lacks.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match ordo_trace::parse_quotas(text, "quotas.toml") {
        Ok(q) => {
            let cluster = ordo_core::ClusterSpec::parse("2x8:a100,1x4:v100").expect("a valid cluster");
            let s = ordo_core::Scheduler::typed(
                &cluster,
                ordo_core::Placement::Consolidated,
                "fifo".parse().expect("a policy"),
                &ordo_core::Speeds::default(),
                ordo_core::ModelPick::default(),
            )
            .expect("a typed scheduler");
            match q.resolve(20, s.capacity(), ordo_core::pools::same_model, |_| Some(0), |_| Some(0)) {
                Ok(r) => {
                    for l in r.user_model_limits(0).iter().chain(r.group_model_limits(0)) {
                        assert!(l.pools != 0, "a limit on no pool: {l:?}");
                    }
                }
                Err(e) => assert!(e.contains("max_running_gpus_by_model."), "an error without the field: {e}"),
            }
        }
        Err(e) => assert!(e.to_string().starts_with("quotas.toml:"), "an error without the file: {e}"),
    }
});
