//! What the driver needs from the controller's configuration (`scontrol show config`): the
//! priority plugin and its weights (which set the range ordo's priorities must sit in) and
//! whether memory is a consumable resource.

use crate::error::SlurmError;

/// Slurm's `TOP_PRIORITY` (`0xffff0000`): under `priority/basic` every job Slurm itself
/// prioritises gets less (the first one submitted `TOP_PRIORITY - 1`, each later one one less),
/// and a restarted controller raises them back to at most this.
pub const SLURM_TOP_PRIORITY: u64 = 0xffff_0000;

/// The highest priority Slurm accepts (`INFINITE - 2`: `INFINITE` asks the plugin to compute
/// it again, `NO_VAL` means "no change").
pub const SLURM_MAX_PRIORITY: u64 = 0xffff_fffd;

/// Values left above ordo's range by default, for priorities set by hand to go before
/// everything ordo orders.
pub const HAND_SET_HEADROOM: u64 = 1000;

/// The parts of the controller's configuration the driver reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmConfig {
    /// `PriorityType`, e.g. `priority/basic` or `priority/multifactor`.
    pub priority_type: String,
    /// Sum of the `PriorityWeight*` factors and the `PriorityWeightTRES` weights: the most
    /// `priority/multifactor` gives a job on its own (every factor is at most 1).
    pub weight_sum: u64,
    /// Whether a `PrioritySiteFactorPlugin` is configured (it may add any amount).
    pub site_factor: bool,
    /// `SelectTypeParameters` name memory (`CR_*_Memory`): jobs' memory limits placement.
    pub memory_consumable: bool,
}

/// The range of priorities ordo gives: `(floor, top]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityRange {
    /// The highest priority Slurm's own priority plugin may give a job: ordo's lowest is above
    /// it, so a job Slurm has just prioritised waits below every job ordo has ranked.
    pub floor: u64,
    /// The highest priority ordo gives.
    pub top: u64,
}

impl PriorityRange {
    /// Values in the range.
    pub fn len(&self) -> u64 {
        self.top.saturating_sub(self.floor)
    }

    /// True for a range with no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `p` is in the range.
    pub fn contains(&self, p: u64) -> bool {
        p > self.floor && p <= self.top
    }
}

impl SlurmConfig {
    /// Parses `scontrol show config` (`Key = Value` lines).
    pub fn parse(text: &str) -> Result<SlurmConfig, SlurmError> {
        let mut cfg =
            SlurmConfig { priority_type: String::new(), weight_sum: 0, site_factor: false, memory_consumable: false };
        for (i, line) in text.lines().enumerate() {
            let Some((k, v)) = line.split_once('=') else { continue };
            let (k, v) = (k.trim(), v.trim());
            let bad = |what: String| SlurmError::Parse {
                source_name: "scontrol show config".into(),
                location: format!("line {}, {k}", i + 1),
                what,
            };
            match k {
                "PriorityType" => cfg.priority_type = v.to_string(),
                "PrioritySiteFactorPlugin" => cfg.site_factor = !v.is_empty() && v != "(null)",
                "SelectTypeParameters" => cfg.memory_consumable = v.to_ascii_uppercase().contains("MEMORY"),
                "PriorityWeightTRES" if v != "(null)" && !v.is_empty() => {
                    for item in v.split(',') {
                        let w = item.split_once('=').map_or(item, |(_, w)| w).trim();
                        let w: f64 = w.parse().map_err(|_| bad(format!("expected `TRES=weight,...`, found `{v}`")))?;
                        cfg.weight_sum = cfg.weight_sum.saturating_add(w.max(0.0).ceil() as u64);
                    }
                }
                "PriorityWeightTRES" => {}
                k if k.starts_with("PriorityWeight") => {
                    let w: u64 = v.parse().map_err(|_| bad(format!("expected a weight, found `{v}`")))?;
                    cfg.weight_sum = cfg.weight_sum.saturating_add(w);
                }
                _ => {}
            }
        }
        if cfg.priority_type.is_empty() {
            return Err(SlurmError::Parse {
                source_name: "scontrol show config".into(),
                location: "PriorityType".into(),
                what: "no `PriorityType = ...` line".into(),
            });
        }
        Ok(cfg)
    }

    /// The highest priority this controller's plugin gives a job on its own: `TOP_PRIORITY` for
    /// `priority/basic`, the weights' sum for `priority/multifactor` (without a site factor
    /// plugin, which may add any amount), `TOP_PRIORITY` otherwise.
    pub fn plugin_ceiling(&self) -> u64 {
        if self.priority_type == "priority/multifactor" && !self.site_factor && self.weight_sum < SLURM_TOP_PRIORITY {
            self.weight_sum
        } else {
            SLURM_TOP_PRIORITY
        }
    }
}

/// ordo's range: `floor` given, else the plugin's ceiling from `config` (else Slurm's
/// `TOP_PRIORITY`, right for basic and for multifactor with weights below it); `top` given, else
/// the highest Slurm accepts less [`HAND_SET_HEADROOM`]. Fails when the range is empty.
pub fn priority_range(
    config: Option<&SlurmConfig>,
    floor: Option<u64>,
    top: Option<u64>,
) -> Result<PriorityRange, String> {
    let floor = floor.unwrap_or_else(|| config.map_or(SLURM_TOP_PRIORITY, SlurmConfig::plugin_ceiling));
    let top = top.unwrap_or(SLURM_MAX_PRIORITY - HAND_SET_HEADROOM);
    if top > SLURM_MAX_PRIORITY {
        return Err(format!("--priority-top {top} is above the highest priority Slurm accepts ({SLURM_MAX_PRIORITY})"));
    }
    if top <= floor {
        return Err(format!(
            "no room for ordo's priorities: the top ({top}) is not above the floor ({floor}, the highest priority \
             Slurm's own plugin may give a job); set --priority-floor/--priority-top"
        ));
    }
    Ok(PriorityRange { floor, top })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;

    #[test]
    fn reads_the_priority_plugin_and_weights() {
        let basic = "PriorityType            = priority/basic\nSelectTypeParameters    = CR_CORE\n";
        let c = SlurmConfig::parse(basic).unwrap();
        assert_eq!((c.plugin_ceiling(), c.memory_consumable), (SLURM_TOP_PRIORITY, false));
        let mf = "PriorityType = priority/multifactor\nPriorityWeightAge = 1000\nPriorityWeightFairShare = 10000\n\
                  PriorityWeightTRES = CPU=1000,Mem=2000,GRES/gpu=3000\nPrioritySiteFactorPlugin = (null)\n\
                  SelectTypeParameters = CR_Core_Memory\n";
        let c = SlurmConfig::parse(mf).unwrap();
        assert_eq!((c.weight_sum, c.plugin_ceiling(), c.memory_consumable), (17_000, 17_000, true));
        let r = priority_range(Some(&c), None, None).unwrap();
        assert_eq!(r, PriorityRange { floor: 17_000, top: 4_294_966_293 });
        assert!(r.contains(17_001) && !r.contains(17_000) && !r.contains(4_294_966_294));
        let site = format!("{mf}PrioritySiteFactorPlugin = site_factor/example\n");
        assert_eq!(SlurmConfig::parse(&site).unwrap().plugin_ceiling(), SLURM_TOP_PRIORITY);
        assert!(SlurmConfig::parse("PriorityWeightAge = lots\nPriorityType=priority/basic").is_err());
        assert!(SlurmConfig::parse("Foo = 1").is_err());
        assert_eq!(priority_range(None, None, None).unwrap().len(), 65_533 - 1000);
        assert!(priority_range(None, Some(10), Some(10)).is_err());
        assert!(priority_range(None, None, Some(SLURM_MAX_PRIORITY + 1)).is_err());
    }
}
