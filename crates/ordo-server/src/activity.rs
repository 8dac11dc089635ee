//! The agent's GPU activity: what each GPU really does (busy %, memory, power), sampled every few
//! seconds through NVML, or for fake GPUs from a file or a seeded generator, and sent to the server.

use crate::activity_api::{GpuSample, MAX_GPU_MEM_MIB, MAX_GPU_POWER_W};
use crate::api::JobNo;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where the agent's activity samples come from (`ordo agent --gpu-activity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActivitySource {
    /// The NVIDIA driver, through NVML (`nvml`; the default with `--gpus auto`).
    Nvml,
    /// A file read at every sample (`file:PATH`): one line per GPU, `GPU UTIL_PCT [MEM_USED_MIB
    /// [POWER_W [SM_PCT]]]`, `#` comments; GPUs it does not list are not sampled.
    File(PathBuf),
    /// A seeded generator (`seed:N`): each job gets a steady profile drawn from the seed and its
    /// id (about one job in five keeps its GPUs under 3% busy), free GPUs are idle.
    Seeded(u64),
    /// No sampling (`off`; the default with fake GPUs).
    Off,
}

impl std::str::FromStr for ActivitySource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected `nvml`, `file:PATH`, `seed:N` or `off`");
        match s {
            "nvml" => Ok(ActivitySource::Nvml),
            "off" => Ok(ActivitySource::Off),
            _ => {
                if let Some(p) = s.strip_prefix("file:").filter(|p| !p.is_empty()) {
                    Ok(ActivitySource::File(PathBuf::from(p)))
                } else if let Some(n) = s.strip_prefix("seed:") {
                    n.parse().map(ActivitySource::Seeded).map_err(|_| bad())
                } else {
                    Err(bad())
                }
            }
        }
    }
}

/// Why samples could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ActivityError {
    /// The activity file could not be read.
    #[error("activity file {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A line of the activity file is wrong.
    #[error("activity file {path}, line {line}: field `{field}`: {why}")]
    Line {
        /// File.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// Field name.
        field: &'static str,
        /// What was expected and found.
        why: String,
    },
    /// NVML is missing or failed.
    #[error("{0}")]
    Nvml(String),
}

/// Takes samples from one source.
pub struct Sampler {
    source: ActivitySource,
    gpus: u32,
    round: u64,
    #[cfg(feature = "nvml")]
    nvml: Option<nvml_wrapper::Nvml>,
    /// Per device: the NVML timestamp of the last process sample read (µs).
    #[cfg(feature = "nvml")]
    last_ts: Vec<u64>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").field("source", &self.source).field("gpus", &self.gpus).finish()
    }
}

impl Sampler {
    /// A sampler of `gpus` GPUs. For NVML, loads the driver now: without one, the error says so.
    pub fn new(source: ActivitySource, gpus: u32) -> Result<Sampler, ActivityError> {
        #[cfg(feature = "nvml")]
        let nvml = match source {
            ActivitySource::Nvml => Some(nvml_wrapper::Nvml::init().map_err(|e| {
                ActivityError::Nvml(format!(
                    "--gpu-activity nvml: no NVIDIA driver found (NVML could not be loaded: {e}); use \
                     --gpu-activity file:PATH or seed:N with fake GPUs, or off"
                ))
            })?),
            _ => None,
        };
        #[cfg(not(feature = "nvml"))]
        if source == ActivitySource::Nvml {
            return Err(ActivityError::Nvml(
                "--gpu-activity nvml: this ordo was built without NVML support (cargo feature `nvml`)".into(),
            ));
        }
        Ok(Sampler {
            source,
            gpus,
            round: 0,
            #[cfg(feature = "nvml")]
            nvml,
            #[cfg(feature = "nvml")]
            last_ts: vec![0; gpus as usize],
        })
    }

    /// Samples the GPUs now. `held` maps GPU index to the job holding it (the seeded generator
    /// draws each job's profile from its id).
    pub fn sample(&mut self, held: &HashMap<u32, JobNo>) -> Result<Vec<GpuSample>, ActivityError> {
        self.round += 1;
        match &self.source {
            ActivitySource::Off => Ok(vec![]),
            ActivitySource::File(p) => read_file(p, self.gpus),
            ActivitySource::Seeded(seed) => Ok(seeded(*seed, self.round, self.gpus, held)),
            ActivitySource::Nvml => self.nvml_sample(),
        }
    }

    #[cfg(feature = "nvml")]
    fn nvml_sample(&mut self) -> Result<Vec<GpuSample>, ActivityError> {
        let Some(nvml) = &self.nvml else { return Ok(vec![]) };
        let count = nvml.device_count().map_err(|e| ActivityError::Nvml(format!("NVML device count: {e}")))?;
        let mut out = Vec::new();
        for i in 0..count.min(self.gpus) {
            let d = nvml.device_by_index(i).map_err(|e| ActivityError::Nvml(format!("NVML device {i}: {e}")))?;
            // Without utilisation there is no sample; the other figures are optional.
            let Ok(u) = d.utilization_rates() else { continue };
            let mem = d.memory_info().ok();
            let last = self.last_ts.get(i as usize).copied().unwrap_or(0);
            // Per-process SM utilisation since the last read: the latest sample of each process,
            // summed (where the driver keeps them; not DCGM's profiling SM activity).
            let sm = d.process_utilization_stats(last).ok().map(|samples| {
                let mut latest: HashMap<u32, (u64, u32)> = HashMap::new();
                for s in &samples {
                    let e = latest.entry(s.pid).or_insert((s.timestamp, s.sm_util));
                    if s.timestamp >= e.0 {
                        *e = (s.timestamp, s.sm_util);
                    }
                }
                if let (Some(ts), Some(slot)) =
                    (samples.iter().map(|s| s.timestamp).max(), self.last_ts.get_mut(i as usize))
                {
                    *slot = ts;
                }
                latest.values().map(|&(_, u)| u as f64).sum::<f64>().min(100.0)
            });
            out.push(GpuSample {
                gpu: i,
                util_pct: (u.gpu as f64).min(100.0),
                sm_pct: sm,
                mem_used_mib: mem.as_ref().map(|m| (m.used / (1 << 20)).min(MAX_GPU_MEM_MIB)),
                mem_total_mib: mem.as_ref().map(|m| (m.total / (1 << 20)).min(MAX_GPU_MEM_MIB)),
                power_w: d.power_usage().ok().map(|mw| (mw as f64 / 1000.0).min(MAX_GPU_POWER_W)),
            });
        }
        Ok(out)
    }

    #[cfg(not(feature = "nvml"))]
    fn nvml_sample(&mut self) -> Result<Vec<GpuSample>, ActivityError> {
        Ok(vec![])
    }
}

/// Whether NVML can be loaded here, and if not why: for tests and the device check, which skip
/// with this message where there is no driver.
pub fn nvml_available() -> Result<u32, String> {
    #[cfg(feature = "nvml")]
    {
        let nvml =
            nvml_wrapper::Nvml::init().map_err(|e| format!("no NVIDIA driver (NVML could not be loaded: {e})"))?;
        nvml.device_count().map_err(|e| format!("NVML device count: {e}"))
    }
    #[cfg(not(feature = "nvml"))]
    Err("built without the `nvml` feature".into())
}

/// Reads an activity file (see [`ActivitySource::File`]) for a node of `gpus` GPUs.
pub fn read_file(path: &Path, gpus: u32) -> Result<Vec<GpuSample>, ActivityError> {
    let text = std::fs::read_to_string(path).map_err(|source| ActivityError::Read { path: path.into(), source })?;
    parse_file(&text, path, gpus)
}

/// Parses the text of an activity file; `path` names it in errors.
pub fn parse_file(text: &str, path: &Path, gpus: u32) -> Result<Vec<GpuSample>, ActivityError> {
    let mut out: Vec<GpuSample> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |field: &'static str, why: String| ActivityError::Line { path: path.into(), line: i + 1, field, why };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 5 {
            return Err(bad(
                "line",
                format!("{} fields; expected GPU UTIL_PCT [MEM_USED_MIB [POWER_W [SM_PCT]]]", f.len()),
            ));
        }
        let gpu: u32 =
            f[0].parse().ok().filter(|&g| g < gpus).ok_or_else(|| {
                bad("gpu", format!("`{}` is not a GPU index from 0 to {}", f[0], gpus.saturating_sub(1)))
            })?;
        if out.iter().any(|s| s.gpu == gpu) {
            return Err(bad("gpu", format!("GPU {gpu} is listed twice")));
        }
        let pct = |field: &'static str, v: &str| {
            v.parse::<f64>()
                .ok()
                .filter(|x| (0.0..=100.0).contains(x))
                .ok_or_else(|| bad(field, format!("`{v}` is not a number from 0 to 100")))
        };
        let util_pct = match f.get(1) {
            Some(v) => pct("util_pct", v)?,
            None => return Err(bad("util_pct", "missing; expected a number from 0 to 100".into())),
        };
        let mem_used_mib = f
            .get(2)
            .map(|v| {
                v.parse::<u64>().ok().filter(|&m| m <= MAX_GPU_MEM_MIB).ok_or_else(|| {
                    bad("mem_used_mib", format!("`{v}` is not a whole number of MiB up to {MAX_GPU_MEM_MIB}"))
                })
            })
            .transpose()?;
        let power_w = f
            .get(3)
            .map(|v| {
                v.parse::<f64>().ok().filter(|p| (0.0..=MAX_GPU_POWER_W).contains(p)).ok_or_else(|| {
                    bad("power_w", format!("`{v}` is not a number of watts from 0 to {MAX_GPU_POWER_W}"))
                })
            })
            .transpose()?;
        let sm_pct = f.get(4).map(|v| pct("sm_pct", v)).transpose()?;
        out.push(GpuSample { gpu, util_pct, sm_pct, mem_used_mib, mem_total_mib: None, power_w });
    }
    Ok(out)
}

/// splitmix64: a well-mixed 64-bit hash, enough for deterministic fake activity.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A number in [0, 1) from a hash.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The seeded generator (see [`ActivitySource::Seeded`]): 80 GB GPUs; a busy job's GPUs run at
/// a level between 40 and 95% (drawn per job) with +-5 points of noise per sample and hold 20
/// to 70 GB; an idle job's run at 0-3% and hold 1-3 GB; free GPUs are at 0% with no memory used.
pub fn seeded(seed: u64, round: u64, gpus: u32, held: &HashMap<u32, JobNo>) -> Vec<GpuSample> {
    (0..gpus)
        .map(|g| {
            let noise = unit(mix(seed ^ mix(round) ^ mix(g as u64 + 1_000_003)));
            let (util, mem) = match held.get(&g) {
                None => (0.0, 0),
                Some(&job) => {
                    let h = mix(seed ^ mix(job));
                    if unit(h) < 0.2 {
                        (3.0 * noise, 1024 + (unit(mix(h)) * 2048.0) as u64)
                    } else {
                        let level = 40.0 + 55.0 * unit(mix(h ^ 1));
                        ((level + 10.0 * noise - 5.0).clamp(0.0, 100.0), 20_480 + (unit(mix(h ^ 2)) * 51_200.0) as u64)
                    }
                }
            };
            let util = (util * 10.0).round() / 10.0;
            GpuSample {
                gpu: g,
                util_pct: util,
                sm_pct: Some((util * 0.8 * 10.0).round() / 10.0),
                mem_used_mib: Some(mem),
                mem_total_mib: Some(81_920),
                power_w: Some(((60.0 + 3.4 * util) * 10.0).round() / 10.0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse() {
        assert_eq!("nvml".parse(), Ok(ActivitySource::Nvml));
        assert_eq!("off".parse(), Ok(ActivitySource::Off));
        assert_eq!("seed:7".parse(), Ok(ActivitySource::Seeded(7)));
        assert_eq!("file:/x/y".parse(), Ok(ActivitySource::File("/x/y".into())));
        for bad in ["", "file:", "seed:x", "dcgm"] {
            assert!(bad.parse::<ActivitySource>().is_err(), "{bad}");
        }
    }

    #[test]
    fn file_lines_and_errors() {
        let p = Path::new("act.txt");
        let s = parse_file("# gpu util mem power sm\n0 95 40000 300 80\n\n2 1.5  # idle\n", p, 4).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].gpu, s[0].util_pct, s[0].mem_used_mib, s[0].power_w, s[0].sm_pct),
            (0, 95.0, Some(40000), Some(300.0), Some(80.0))
        );
        assert_eq!((s[1].gpu, s[1].util_pct, s[1].mem_used_mib), (2, 1.5, None));
        let err = |t: &str| parse_file(t, p, 4).unwrap_err().to_string();
        assert_eq!(
            err("0 50\n4 1\n"),
            "activity file act.txt, line 2: field `gpu`: `4` is not a GPU index from 0 to 3"
        );
        assert!(err("0 101").contains("line 1: field `util_pct`: `101` is not a number from 0 to 100"));
        assert!(err("0 NaN").contains("field `util_pct`"));
        assert!(err("0").contains("field `util_pct`: missing"));
        assert!(err("0 1 -5").contains("field `mem_used_mib`"));
        assert!(err("0 1 5 inf").contains("field `power_w`"));
        assert!(err("0 1\n0 2").contains("line 2: field `gpu`: GPU 0 is listed twice"));
        assert!(err("0 1 2 3 4 5").contains("6 fields"));
    }

    #[test]
    fn seeded_is_deterministic_bounded_and_mixed() {
        let held: HashMap<u32, JobNo> = (0..8).map(|g| (g, g as JobNo + 1)).collect();
        assert_eq!(seeded(3, 1, 8, &held), seeded(3, 1, 8, &held));
        assert_ne!(seeded(3, 1, 8, &held), seeded(3, 2, 8, &held));
        let free = seeded(3, 1, 2, &HashMap::new());
        assert!(free.iter().all(|s| s.util_pct == 0.0 && s.mem_used_mib == Some(0)));
        // Over many jobs, about one in five is idle, and every value is in range.
        let (mut idle, mut n) = (0, 0);
        for job in 1..=2000u64 {
            let h: HashMap<u32, JobNo> = [(0, job)].into();
            let s = &seeded(9, 5, 1, &h)[0];
            assert!((0.0..=100.0).contains(&s.util_pct) && s.mem_used_mib.unwrap() <= 81_920);
            idle += (s.util_pct < 5.0) as u32;
            n += 1;
        }
        let share = idle as f64 / n as f64;
        assert!((0.15..0.25).contains(&share), "idle share {share}");
    }

    /// NVML on a machine with the driver: every figure in range. Elsewhere it says why it skips
    /// (the device check, scripts/device-check-nvml.sh, runs it with ORDO_REQUIRE_NVML=1).
    #[test]
    fn nvml_samples_where_a_driver_is() {
        let count = match nvml_available() {
            Ok(n) => n,
            Err(why) => {
                assert!(std::env::var("ORDO_REQUIRE_NVML").is_err(), "ORDO_REQUIRE_NVML is set but {why}");
                eprintln!("skipped: NVML sampling: {why}");
                return;
            }
        };
        let mut s = Sampler::new(ActivitySource::Nvml, count).expect("NVML loads");
        let a = s.sample(&HashMap::new()).expect("sample");
        assert_eq!(a.len(), count as usize, "one sample per GPU: {a:?}");
        for g in &a {
            assert!((0.0..=100.0).contains(&g.util_pct), "{g:?}");
            assert!(g.mem_total_mib.is_some_and(|t| t > 0), "memory total reported: {g:?}");
            assert!(g.mem_used_mib <= g.mem_total_mib, "{g:?}");
        }
        eprintln!("NVML samples: {a:?}");
    }
}
