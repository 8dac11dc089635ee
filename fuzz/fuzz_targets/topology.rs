//! Fuzzes topology files (`--topology`: Slurm's topology.conf and ordo's TOML,
//! `ordo_trace::parse_topology_conf` / `parse_topology_toml`): any text must give a topology of
//! the cluster's nodes whose levels and slowdown factors hold, or an error naming the file,
//! never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let cluster = ordo_core::ClusterSpec::uniform(16, 4);
    for (file, r) in [
        ("topology.conf", ordo_trace::parse_topology_conf(text, "topology.conf", &cluster)),
        ("topology.toml", ordo_trace::parse_topology_toml(text, "topology.toml", &cluster)),
    ] {
        match r {
            Ok(t) => {
                assert_eq!(t.nodes(), 16);
                let levels = t.levels().len();
                assert!((1..=ordo_core::topology::MAX_LEVELS).contains(&levels));
                let all: Vec<u32> = (0..16).collect();
                assert!(t.crossed(all.iter().copied()) <= levels);
                for c in [None, Some("lm")] {
                    let f = t.factor(c, levels);
                    assert!(f.is_finite() && f >= 1.0, "factor {f}");
                }
                // Placement on it never panics and never crosses a required level.
                let mut s =
                    ordo_core::Scheduler::new(&cluster, ordo_core::Placement::Consolidated, "fifo".parse().unwrap());
                s.set_topology(std::sync::Arc::new(t.clone())).unwrap();
                let d = ordo_core::Demand::gpus(12).with_topo(ordo_core::TopoNeed::required(0));
                if let Some(a) = s.capacity().place_for(d) {
                    assert_eq!(t.crossed(a.parts.iter().map(|p| p.0)), 0);
                }
            }
            Err(e) => assert!(e.to_string().starts_with(file), "an error without the file: {e}"),
        }
    }
});
