//! Gangs: pods that are bound all or none. ordo-core places a gang as one job of its members'
//! total GPUs, CPU and memory; this splits that placement back into one node per member.

use crate::objects::Ask;

/// Assigns each member (by index into `members`) to one part of an allocation, where part `p`
/// offers `parts[p]` (GPUs, CPU and memory the core took on that node for the gang). Members
/// are taken largest first (by GPUs, then CPU, then memory), each to the first part that still
/// holds it. `None` when some member fits no part: the allocation cannot be split into pods.
pub fn split(members: &[Ask], parts: &[Ask]) -> Option<Vec<usize>> {
    let mut left: Vec<Ask> = parts.to_vec();
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&i| {
        let a = members[i];
        (std::cmp::Reverse(a.gpus), std::cmp::Reverse(a.cpu_milli), std::cmp::Reverse(a.mem_bytes), i)
    });
    let mut out = vec![usize::MAX; members.len()];
    for i in order {
        let p = left.iter().position(|l| l.holds(members[i]))?;
        left[p] = left[p].minus(members[i]);
        out[i] = p;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(gpus: u32) -> Ask {
        Ask { gpus, cpu_milli: 1000 * gpus as u64, mem_bytes: 0 }
    }

    #[test]
    fn splits_whole_nodes_and_refuses_what_does_not_divide() {
        // 4 pods of 8 GPUs on 4 whole nodes.
        assert_eq!(split(&[g(8); 4], &[g(8); 4]), Some(vec![0, 1, 2, 3]));
        // 4 pods of 2 GPUs on one node.
        assert_eq!(split(&[g(2); 4], &[g(8)]), Some(vec![0; 4]));
        // 4 pods of 3 GPUs on 8 + 4 GPUs: the third node-part cannot hold the last pod.
        assert_eq!(split(&[g(3); 4], &[g(8), g(4)]), None);
        // Mixed sizes: the largest first.
        assert_eq!(split(&[g(1), g(4), g(3)], &[g(4), g(4)]), Some(vec![1, 0, 1]));
    }
}
