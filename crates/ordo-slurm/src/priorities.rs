//! Priorities that make Slurm follow ordo's order with as few updates as it can: sparse values
//! with gaps, the longest run already in order kept, the others moved into gaps, a region
//! renumbered only when its gap has no room. Pure: no IO.
//!
//! Slurm starts pending jobs in descending priority, so the order needs priorities strictly
//! descending along it, inside ordo's range `(floor, top]`. Each update is an RPC to the
//! controller, so the assignment changes as few jobs as it can:
//!
//! 1. keep the longest subsequence of jobs whose current priorities (ones ordo set and that are
//!    in its range) already descend along the order;
//! 2. every other job moves into the gap between the kept jobs around it, spaced evenly;
//! 3. where a gap has fewer free values than jobs to move into it, the gap grows into its
//!    neighbours (the side with more free values first), and the kept jobs it swallows are
//!    renumbered with the rest, until the region holds its jobs with as many values to spare as
//!    jobs arrived in it (so the next arrivals there fit without renumbering again).
//!
//! A fresh queue is spread evenly over the whole range.

use crate::config::PriorityRange;

/// One job of the order, as the assignment sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Its priority now.
    pub current: u64,
    /// Whether its current priority may be kept (ordo set it and nobody changed it since).
    /// A job Slurm prioritised itself always moves into ordo's range.
    pub ours: bool,
}

/// The result: new priorities for the jobs that change.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// `(position in the order, new priority)` for every job whose priority changes, in order.
    pub changes: Vec<(usize, u64)>,
    /// Jobs at the end of the order that did not fit in the range (more jobs than values);
    /// they keep their priorities.
    pub unplaced: usize,
}

/// Priorities strictly descending along `order`, all in `range`, changing as few as it can
/// (see the module documentation). Jobs keep their priority unless they appear in `changes`.
pub fn assign(order: &[Slot], range: PriorityRange) -> Assignment {
    let n = order.len();
    let kept = longest_descending(order, range);
    // Anchors: the kept jobs between two sentinels, the value above the range at position -1 and
    // the floor at position n. Jobs between two anchors take values strictly between theirs.
    let mut anchors: Vec<(i64, u64)> = Vec::with_capacity(kept.len() + 2);
    anchors.push((-1, range.top.saturating_add(1)));
    anchors.extend(kept.iter().map(|&i| (i as i64, order[i].current)));
    anchors.push((n as i64, range.floor));
    let last = anchors.len() - 1;
    let jobs = |l: usize, r: usize| (anchors[r].0 - anchors[l].0 - 1) as u64;
    let room = |l: usize, r: usize| anchors[l].1 - anchors[r].1 - 1;
    let movers = |l: usize, r: usize| jobs(l, r) - (r - l - 1) as u64;
    // Regions between two anchors whose jobs get new values; anchors inside a region are
    // renumbered with it.
    let mut regions: Vec<(usize, usize)> = Vec::new();
    let mut j = 0;
    while j < last {
        let (mut l, mut r) = (j, j + 1);
        if jobs(l, r) == 0 {
            j += 1;
            continue;
        }
        if room(l, r) < jobs(l, r) {
            loop {
                // A region that grew up into ones already chosen takes them in.
                while let Some(&(pl, pr)) = regions.last() {
                    if pr <= l {
                        break;
                    }
                    l = l.min(pl);
                    regions.pop();
                }
                let whole = l == 0 && r == last;
                let need = jobs(l, r) + if whole { 0 } else { movers(l, r) };
                if room(l, r) >= need || whole {
                    break;
                }
                // Free values in the next gap on each side (values less jobs there).
                let free = |a: usize, b: usize| room(a, b) as i128 - jobs(a, b) as i128;
                let up = (l > 0).then(|| free(l - 1, l));
                let down = (r < last).then(|| free(r, r + 1));
                match (up, down) {
                    (Some(u), Some(d)) if u > d => l -= 1,
                    (Some(_), None) => l -= 1,
                    _ => r += 1,
                }
            }
        }
        regions.push((l, r));
        j = r;
    }
    let mut out = Assignment::default();
    for (l, r) in regions {
        let (from, to) = ((anchors[l].0 + 1) as usize, anchors[r].0 as usize);
        let (hi, lo) = (anchors[l].1, anchors[r].1);
        let fit = ((hi - lo - 1) as usize).min(to - from);
        out.unplaced += (to - from) - fit;
        let span = u128::from(hi - lo);
        for k in 0..fit {
            let v = hi - (((k as u128 + 1) * span) / (fit as u128 + 1)) as u64;
            if order[from + k].current != v {
                out.changes.push((from + k, v));
            }
        }
    }
    out
}

/// Positions of a longest subsequence of `ours` jobs in `range` whose current priorities
/// strictly descend along the order (patience sorting, `O(n log n)`).
fn longest_descending(order: &[Slot], range: PriorityRange) -> Vec<usize> {
    // tails[k]: the position of the last job of the best descending run of length k + 1 found so
    // far, the one with the highest last value.
    let mut tails: Vec<usize> = Vec::new();
    let mut prev: Vec<Option<usize>> = vec![None; order.len()];
    for (i, s) in order.iter().enumerate() {
        if !s.ours || !range.contains(s.current) {
            continue;
        }
        // The first run whose last value is not above this one's: this job ends a run one longer
        // than the run before it.
        let k = tails.partition_point(|&t| order[t].current > s.current);
        prev[i] = k.checked_sub(1).map(|k| tails[k]);
        if k == tails.len() {
            tails.push(i);
        } else {
            tails[k] = i;
        }
    }
    let mut out = Vec::with_capacity(tails.len());
    let mut at = tails.last().copied();
    while let Some(i) = at {
        out.push(i);
        at = prev[i];
    }
    out.reverse();
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken expectation
mod tests {
    use super::*;
    use proptest::prelude::*;

    const R: PriorityRange = PriorityRange { floor: 100, top: 200 };

    fn ours(v: &[u64]) -> Vec<Slot> {
        v.iter().map(|&current| Slot { current, ours: true }).collect()
    }

    /// The priorities after applying an assignment.
    fn apply(order: &[Slot], a: &Assignment) -> Vec<u64> {
        let mut v: Vec<u64> = order.iter().map(|s| s.current).collect();
        for &(i, p) in &a.changes {
            v[i] = p;
        }
        v
    }

    fn check(order: &[Slot], range: PriorityRange, a: &Assignment) {
        let v = apply(order, a);
        let placed = order.len() - a.unplaced;
        assert!(v[..placed].windows(2).all(|w| w[0] > w[1]), "not strictly descending: {v:?}");
        assert!(v[..placed].iter().all(|&p| range.contains(p)), "outside {range:?}: {v:?}");
    }

    /// Worked by hand: a fresh queue of 4 in (100, 200] is spread evenly between the sentinels
    /// 201 and 100: 201 - floor(101 * k / 5) for k = 1..4 gives 181, 161, 141, 121.
    #[test]
    fn a_fresh_queue_is_spread_evenly() {
        let order: Vec<Slot> = [5, 4, 3, 2].iter().map(|&c| Slot { current: c, ours: false }).collect();
        let a = assign(&order, R);
        assert_eq!(a.changes, vec![(0, 181), (1, 161), (2, 141), (3, 121)]);
    }

    #[test]
    fn a_queue_in_order_costs_nothing() {
        assert_eq!(assign(&ours(&[190, 150, 149, 101]), R), Assignment::default());
        assert_eq!(assign(&[], R), Assignment::default());
    }

    /// A new job (Slurm's value, below the floor) between 160 and 140 goes to 150; one at the
    /// end between 120 and the floor (100) to 110.
    #[test]
    fn arrivals_go_into_gaps() {
        let mut order = ours(&[180, 160, 140, 120]);
        order.insert(2, Slot { current: 7, ours: false });
        order.push(Slot { current: 6, ours: false });
        let a = assign(&order, R);
        assert_eq!(a.changes, vec![(2, 150), (5, 110)]);
    }

    /// A job that jumps the queue moves alone; the others keep theirs.
    #[test]
    fn one_job_out_of_place_moves_alone() {
        let a = assign(&ours(&[180, 160, 140, 190, 120]), R);
        assert_eq!(a.changes, vec![(3, 130)]);
    }

    /// No room between 150 and 149 for one job: the gap grows into the side with more free
    /// values (above: 50 values from 151 to 200 and no job; below: 28 values from 121 to 148),
    /// taking in 150; its two jobs then spread between 201 and 149: 201 - floor(52 * k / 3) for
    /// k = 1, 2 gives 184 and 167. 149 and 120 keep theirs.
    #[test]
    fn a_full_gap_grows_and_renumbers_a_region() {
        let mut order = ours(&[150, 149, 120]);
        order.insert(1, Slot { current: 3, ours: false });
        let a = assign(&order, R);
        check(&order, R, &a);
        assert_eq!(a.changes, vec![(0, 184), (1, 167)]);
    }

    #[test]
    fn more_jobs_than_values_leaves_the_rest() {
        let r = PriorityRange { floor: 0, top: 3 };
        let order: Vec<Slot> = (0..5).map(|_| Slot { current: 0, ours: false }).collect();
        let a = assign(&order, r);
        assert_eq!(a.unplaced, 2);
        assert_eq!(a.changes, vec![(0, 3), (1, 2), (2, 1)]);
    }

    /// Not ours (set by someone else) or outside the range: never kept.
    #[test]
    fn only_ordos_values_in_range_are_kept() {
        let order = vec![
            Slot { current: 180, ours: false },
            Slot { current: 300, ours: true },
            Slot { current: 150, ours: true },
        ];
        let a = assign(&order, R);
        check(&order, R, &a);
        assert_eq!(a.changes.iter().map(|c| c.0).collect::<Vec<_>>(), vec![0, 1]);
    }

    /// Issue 18's target in numbers: 20,000 jobs spread over the range priority/basic leaves
    /// ordo (64,533 values), then ten arrivals at the end (fifo), at the head (sjf with short
    /// jobs) or scattered: at most 50 updates, and ten more after those still as few.
    #[test]
    fn ten_arrivals_among_20000_cost_at_most_50() {
        let range = crate::config::priority_range(None, None, None).unwrap();
        let fresh: Vec<Slot> = (0..20_000).map(|_| Slot { current: 7, ours: false }).collect();
        let laid: Vec<Slot> =
            apply(&fresh, &assign(&fresh, range)).into_iter().map(|current| Slot { current, ours: true }).collect();
        let new = Slot { current: 5, ours: false };
        for (name, at) in
            [("end", vec![20_000; 10]), ("head", vec![0; 10]), ("scattered", (0..10).map(|k| k * 1999).collect())]
        {
            let mut order = laid.clone();
            for round in 0..3 {
                for &p in &at {
                    order.insert((p + round).min(order.len()), new);
                }
                let a = assign(&order, range);
                check(&order, range, &a);
                assert!(a.changes.len() <= 50, "{name}, round {round}: {} updates", a.changes.len());
                order = apply(&order, &a).into_iter().map(|current| Slot { current, ours: true }).collect();
            }
        }
    }

    proptest! {
        /// Any queue: the result descends strictly inside the range, and assigning again
        /// changes nothing.
        #[test]
        fn always_descending_and_stable(v in proptest::collection::vec((0u64..400, any::<bool>()), 0..60), floor in 0u64..150, len in 1u64..300) {
            let range = PriorityRange { floor, top: floor + len };
            let order: Vec<Slot> = v.iter().map(|&(current, ours)| Slot { current, ours }).collect();
            let a = assign(&order, range);
            check(&order, range, &a);
            let again: Vec<Slot> = apply(&order, &a).into_iter().map(|current| Slot { current, ours: true }).collect();
            let b = assign(&again, range);
            prop_assert!(b.changes.is_empty() || a.unplaced > 0, "second pass changed {:?}", b.changes);
        }

        /// After a fresh spread of `n` jobs over a wide range, `k` arrivals anywhere cost at
        /// most a few updates each.
        #[test]
        fn arrivals_are_cheap(n in 100usize..2000, at in proptest::collection::vec(0usize..2000, 1..10)) {
            let range = PriorityRange { floor: 1000, top: 1000 + 3 * n as u64 };
            let fresh: Vec<Slot> = (0..n).map(|_| Slot { current: 0, ours: false }).collect();
            let laid = apply(&fresh, &assign(&fresh, range));
            let mut order: Vec<Slot> = laid.into_iter().map(|current| Slot { current, ours: true }).collect();
            for &p in &at {
                order.insert(p.min(order.len()), Slot { current: 1, ours: false });
            }
            let a = assign(&order, range);
            check(&order, range, &a);
            prop_assert!(a.changes.len() <= 5 * at.len(), "{} arrivals cost {} updates", at.len(), a.changes.len());
        }
    }
}
