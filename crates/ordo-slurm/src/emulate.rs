//! The ordo policy that emulates a Slurm controller's own order (`ordo slurm policy`): its
//! priority plugin and weights and its scheduler, read from `scontrol show config`, as one of
//! ordo-core's policies, with every part of the configuration it does not model named.
//!
//! Slurm's `priority/multifactor` (https://slurm.schedmd.com/priority_multifactor.html) gives
//! `Σ weight · factor`, each factor in [0, 1]. ordo's `priority` policy has the age factor
//! `min(wait / max_age, 1)` (`PriorityWeightAge`, `PriorityMaxAge`), the classic fair-share
//! factor `2^(-U/S)` with equal shares (`PriorityWeightFairshare`, `PriorityDecayHalfLife`), and
//! a size factor `GPUs / cluster GPUs`, which is Slurm's TRES factor for `GRES/gpu`
//! (`PriorityWeightTRES=GRES/gpu=W`: the job's GPUs over the partition's). `sched/backfill`
//! reserves a start for every pending job it tests and starts a lower one only where it delays
//! none of them: ordo's `+conservative`. `priority/basic` is submit order: `fifo`.

use crate::error::SlurmError;
use ordo_core::time::SECOND;
use ordo_core::Time;

/// What `scontrol show config` says of the order, and the ordo policy that emulates it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Emulation {
    /// The ordo policy (parses as an ordo `PolicySpec`).
    pub policy: String,
    /// The settings it was made from, as `Key = Value`.
    pub from: Vec<String>,
    /// Parts of the configuration ordo does not model (empty: none that matter).
    pub not_modelled: Vec<String>,
}

/// `7-00:00:00`, `00:05:00`, `5` (minutes), as Slurm writes durations.
fn duration(v: &str) -> Option<Time> {
    let v = v.trim();
    if let Ok(m) = v.parse::<i64>() {
        return Some(m * 60 * SECOND);
    }
    ordo_trace::parse_slurm_duration(v.as_bytes())
}

fn fmt_secs(t: Time) -> String {
    format!("{}", t / SECOND)
}

impl Emulation {
    /// From `scontrol show config`'s text.
    pub fn from_config(text: &str) -> Result<Emulation, SlurmError> {
        // Keys without case: Slurm writes `PriorityWeightFairShare`, its documentation
        // `PriorityWeightFairshare`.
        let mut keys: std::collections::BTreeMap<String, &str> = std::collections::BTreeMap::new();
        for line in text.lines() {
            if let Some((k, v)) = line.split_once('=') {
                keys.insert(k.trim().to_ascii_lowercase(), v.trim());
            }
        }
        struct Keys<'a>(std::collections::BTreeMap<String, &'a str>);
        impl<'a> Keys<'a> {
            fn get(&self, k: &str) -> Option<&&'a str> {
                self.0.get(&k.to_ascii_lowercase())
            }
        }
        let get = Keys(keys);
        let bad = |key: &str, what: String| SlurmError::Parse {
            source_name: "scontrol show config".into(),
            location: key.to_string(),
            what,
        };
        let ptype =
            *get.get("PriorityType").ok_or_else(|| bad("PriorityType", "no `PriorityType = ...` line".into()))?;
        let sched = get.get("SchedulerType").copied().unwrap_or("sched/backfill");
        let mut from = vec![format!("PriorityType = {ptype}"), format!("SchedulerType = {sched}")];
        let mut not_modelled = Vec::new();
        let backfill = match sched {
            "sched/backfill" => "+conservative",
            "sched/builtin" => "",
            other => {
                not_modelled.push(format!("SchedulerType = {other} (taken as sched/builtin: no backfill)"));
                ""
            }
        };
        let weight = |key: &str| -> Result<f64, SlurmError> {
            match get.get(key) {
                None => Ok(0.0),
                Some(v) => v.parse::<f64>().map_err(|_| bad(key, format!("expected a weight, found `{v}`"))),
            }
        };
        let policy = match ptype {
            "priority/basic" => format!("fifo{backfill}"),
            "priority/multifactor" => {
                let age = weight("PriorityWeightAge")?;
                let fairshare = weight("PriorityWeightFairshare")?;
                let mut size = 0.0;
                if let Some(tres) = get.get("PriorityWeightTRES").filter(|v| !v.is_empty() && **v != "(null)") {
                    from.push(format!("PriorityWeightTRES = {tres}"));
                    for item in tres.split(',') {
                        let (name, w) = item.split_once('=').ok_or_else(|| {
                            bad("PriorityWeightTRES", format!("expected `TRES=weight,...`, found `{tres}`"))
                        })?;
                        let w: f64 = w.trim().parse().map_err(|_| {
                            bad("PriorityWeightTRES", format!("expected `TRES=weight,...`, found `{tres}`"))
                        })?;
                        if name.trim().eq_ignore_ascii_case("gres/gpu") {
                            size = w;
                        } else if w != 0.0 {
                            not_modelled.push(format!(
                                "the TRES factor of {} (weight {w}): ordo weighs GPUs only",
                                name.trim()
                            ));
                        }
                    }
                }
                for (key, what) in [
                    ("PriorityWeightJobSize", "the job size factor (nodes and CPUs)"),
                    ("PriorityWeightPartition", "the partition factor"),
                    ("PriorityWeightQOS", "the QOS factor"),
                    ("PriorityWeightAssoc", "the association factor"),
                ] {
                    let w = weight(key)?;
                    if w != 0.0 {
                        not_modelled.push(format!("{what} ({key} = {w})"));
                    }
                }
                if get.get("PrioritySiteFactorPlugin").is_some_and(|v| !v.is_empty() && *v != "(null)") {
                    not_modelled.push("the site factor plugin (PrioritySiteFactorPlugin)".into());
                }
                let max_age = match get.get("PriorityMaxAge") {
                    Some(v) => {
                        duration(v).ok_or_else(|| bad("PriorityMaxAge", format!("expected a duration, found `{v}`")))?
                    }
                    None => 7 * 86_400 * SECOND,
                };
                let half_life = match get.get("PriorityDecayHalfLife") {
                    Some(v) => duration(v)
                        .ok_or_else(|| bad("PriorityDecayHalfLife", format!("expected a duration, found `{v}`")))?,
                    None => 7 * 86_400 * SECOND,
                };
                for key in ["PriorityWeightAge", "PriorityWeightFairshare", "PriorityMaxAge", "PriorityDecayHalfLife"] {
                    if let Some(v) = get.get(key) {
                        from.push(format!("{key} = {v}"));
                    }
                }
                if fairshare != 0.0 {
                    not_modelled.push(
                        "fair share by association: ordo gives every user an equal share (the classic 2^(-U/S))".into(),
                    );
                }
                if age != 0.0 || fairshare != 0.0 {
                    if let Some(p) = get.get("PriorityCalcPeriod") {
                        from.push(format!("PriorityCalcPeriod = {p}"));
                        not_modelled.push(format!(
                            "PriorityCalcPeriod = {p}: Slurm recomputes waiting jobs' priorities that often; ordo at every decision"
                        ));
                    }
                }
                format!(
                    "priority:age={age},fairshare={fairshare},size={size},qos=0,half_life={},max_age={}{backfill}",
                    fmt_secs(half_life.max(SECOND)),
                    fmt_secs(max_age.max(SECOND))
                )
            }
            other => {
                return Err(bad(
                    "PriorityType",
                    format!("`{other}`: ordo emulates priority/basic and priority/multifactor"),
                ))
            }
        };
        if backfill.is_empty() {
            from.push("no backfill".into());
        } else if let Some(p) = get.get("SchedulerParameters").filter(|p| p.contains("bf_max_job_test")) {
            not_modelled.push(format!(
                "SchedulerParameters = {p}: backfill tests only that many jobs; ordo's conservative backfill all"
            ));
        }
        Ok(Emulation { policy, from, not_modelled })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    #[test]
    fn multifactor_with_gpu_tres_and_backfill() {
        let cfg = "PriorityType            = priority/multifactor\nSchedulerType = sched/backfill\n\
                   PriorityWeightAge = 1000\nPriorityWeightFairShare = 0\nPriorityWeightJobSize = 0\n\
                   PriorityWeightQOS = 0\nPriorityWeightTRES = GRES/gpu=2000\nPriorityMaxAge = 00:10:00\n\
                   PriorityDecayHalfLife = 7-00:00:00\nPriorityCalcPeriod = 00:01:00\n";
        let e = Emulation::from_config(cfg).unwrap();
        assert_eq!(e.policy, "priority:age=1000,fairshare=0,size=2000,qos=0,half_life=604800,max_age=600+conservative");
        assert!(e.policy.parse::<ordo_core::PolicySpec>().is_ok());
        assert_eq!(e.not_modelled.len(), 1, "{:?}", e.not_modelled);
        assert!(e.not_modelled[0].starts_with("PriorityCalcPeriod"));
    }

    #[test]
    fn basic_and_what_is_not_modelled() {
        let e = Emulation::from_config("PriorityType = priority/basic\nSchedulerType = sched/builtin\n").unwrap();
        assert_eq!(e.policy, "fifo");
        let cfg = "PriorityType = priority/multifactor\nPriorityWeightJobSize = 500\nPriorityWeightTRES = CPU=10,GRES/gpu=5\n";
        let e = Emulation::from_config(cfg).unwrap();
        assert!(e.policy.contains("size=5"), "{}", e.policy);
        assert_eq!(e.not_modelled.len(), 2, "{:?}", e.not_modelled);
        assert!(Emulation::from_config("SchedulerType = sched/backfill\n").is_err());
        let err =
            Emulation::from_config("PriorityType = priority/multifactor\nPriorityWeightAge = lots\n").unwrap_err();
        assert!(err.to_string().contains("PriorityWeightAge: expected a weight, found `lots`"), "{err}");
    }
}
