//! Transforms of a workload before it is simulated.

use ordo_core::{JobId, Workload};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, LogNormal};

/// Shuffles, with a seeded RNG, the order of jobs submitted at the same instant, then renumbers
/// the jobs so that arrival order follows the shuffle. Traces often hold jobs submitted in the
/// same second; a simulator's result can depend on which of them it queues first (research
/// simulators that sort with an unstable sort pick one arbitrarily). Running several seeds
/// shows how much a result depends on that choice.
pub fn shuffle_ties(w: &mut Workload, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    w.renumber();
    let mut i = 0;
    while i < w.jobs.len() {
        let t = w.jobs[i].submit;
        let j = i + w.jobs[i..].iter().take_while(|x| x.submit == t).count();
        w.jobs[i..j].shuffle(&mut rng);
        i = j;
    }
    for (k, job) in w.jobs.iter_mut().enumerate() {
        job.id = JobId(k as u32);
    }
}

/// Gives every job a run-time estimate of its true run time times exp(N(0, sigma^2)), drawn
/// with a seeded RNG (at least 1 ms). With sigma 0 the estimates are exact.
pub fn noisy_estimates(w: &mut Workload, sigma: f64, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6e6f_6973_7921);
    let dist = LogNormal::new(0.0, sigma.max(0.0)).unwrap_or_else(|_| LogNormal::new(0.0, 0.0).expect("valid"));
    for j in &mut w.jobs {
        let f: f64 = dist.sample(&mut rng);
        j.estimate = Some(((j.runtime as f64 * f).round() as i64).max(1));
    }
}

/// Gives every gang (a job of more GPUs than `largest_node_gpus`, the cluster's largest node)
/// that asks nothing of the topology the ask `ask` (`--gang-topology`); a job's own ask stays.
/// Returns how many jobs got it.
pub fn ask_gangs(w: &mut Workload, largest_node_gpus: u32, ask: &ordo_core::TopoAsk) -> usize {
    let mut n = 0;
    for j in w.jobs.iter_mut().filter(|j| j.gpus > largest_node_gpus) {
        let needs = j.needs.get_or_insert_with(Default::default);
        if needs.topology.is_none() {
            needs.topology = Some(ask.clone());
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use ordo_core::Job;

    fn w(submits: &[i64]) -> Workload {
        let mut w = Workload::default();
        for (i, &s) in submits.iter().enumerate() {
            w.jobs.push(Job {
                id: JobId(i as u32),
                name: i.to_string(),
                user: 0,
                group: 0,
                submit: s,
                gpus: 1,
                cpus: None,
                mem_mib: None,
                runtime: 1000,
                estimate: None,
                priority: None,
                gpu_milli: None,
                queue: None,
                after: vec![],
                failed: false,
                start: None,
                needs: None,
            });
        }
        w
    }

    #[test]
    fn only_ties_move_and_ids_stay_dense() {
        let mut a = w(&[0, 5, 5, 5, 5, 5, 5, 9]);
        shuffle_ties(&mut a, 3);
        assert_eq!(a.jobs.first().unwrap().name, "0");
        assert_eq!(a.jobs.last().unwrap().name, "7");
        assert!(a.jobs.iter().enumerate().all(|(i, j)| j.id.idx() == i));
        let mut b = w(&[0, 5, 5, 5, 5, 5, 5, 9]);
        shuffle_ties(&mut b, 3);
        assert_eq!(a, b, "same seed, same order");
        let names: Vec<&str> = a.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_ne!(names, ["0", "1", "2", "3", "4", "5", "6", "7"], "seed 3 moves some tie");
    }

    #[test]
    fn noisy_estimates_are_seeded_and_spread() {
        let mut a = w(&[0, 1, 2, 3, 4, 5, 6, 7]);
        noisy_estimates(&mut a, 0.0, 1);
        assert!(a.jobs.iter().all(|j| j.estimate == Some(1000)));
        noisy_estimates(&mut a, 1.0, 1);
        let e1: Vec<_> = a.jobs.iter().map(|j| j.estimate).collect();
        noisy_estimates(&mut a, 1.0, 1);
        let e2: Vec<_> = a.jobs.iter().map(|j| j.estimate).collect();
        assert_eq!(e1, e2);
        assert!(e1.iter().any(|e| e.unwrap() < 1000) && e1.iter().any(|e| e.unwrap() > 1000));
    }
}
