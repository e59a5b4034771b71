//! Fair remote limits: each consumerd's share of the cluster.
//!
//! [`fair_remote_limits`] splits the cluster's tasks-at-once among
//! consumerds by max-min fairness (water-filling): consumerds that want less
//! than an equal share get what they want, and the rest share what remains
//! equally. Capacity nobody asked for is spread evenly on top, so a consumerd
//! whose build starts between two intervals need not wait for the next one
//! to get going. [`remote_total`] is the number being split.
//!
//! Left out: routes. A consumerd's share is of the whole cluster, not of the
//! agents that serve its toolchains; the router's per-route round-robin keeps
//! one consumerd from starving another on a shared route.

use super::Params;

/// Tasks the consumerds may keep remote at once, all together: the agents'
/// limits, raised for the tasks the cache answers (which never take a token)
/// and by the headroom that keeps a short queue at the scheduler.
pub fn remote_total(cluster_limit: u64, cache_hit_ratio: f64, params: &Params) -> u64 {
    let hit = if cache_hit_ratio.is_finite() { cache_hit_ratio.clamp(0.0, 1.0) } else { 0.0 };
    // At a hit ratio of 1 this is infinite before the cap; min() handles it.
    let boost = (1.0 / (1.0 - hit)).min(params.max_cache_boost.max(1.0));
    let headroom = if params.remote_headroom.is_finite() { params.remote_headroom.max(1.0) } else { 1.0 };
    let total = (cluster_limit as f64 * boost * headroom).floor();
    // In range before the cast.
    total.clamp(0.0, f64::from(u32::MAX)) as u64
}

/// Each consumerd's preferred remote limit, in the order of `demand` (tasks
/// each wants remote now).
///
/// While the cluster has any capacity every consumerd gets at least 1, even
/// when that adds up to more than the cluster (the agents' tokens still bound
/// what runs); a consumerd that wants nothing is counted as wanting
/// [`Params::idle_floor`], so it can start. With no capacity every limit is 0:
/// send nothing remote.
pub fn fair_remote_limits(cluster_limit: u64, cache_hit_ratio: f64, demand: &[u32], params: &Params) -> Vec<u32> {
    let n = demand.len();
    let total = remote_total(cluster_limit, cache_hit_ratio, params);
    if n == 0 || total == 0 {
        return vec![0; n];
    }
    let asks: Vec<u32> = demand.iter().map(|w| (*w).max(params.idle_floor)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| asks[i]);

    // Water-filling: serve the smallest asks first, each capped at an equal
    // split of what is left.
    let mut left = total as f64;
    let mut share = vec![0.0_f64; n];
    for (k, &i) in order.iter().enumerate() {
        let level = left / (n - k) as f64;
        let give = f64::from(asks[i]).min(level);
        share[i] = give;
        left -= give;
    }
    if left > 0.0 {
        let spare = left / n as f64;
        share.iter_mut().for_each(|s| *s += spare);
    }

    // Whole tasks: round down, then give the units left over to the largest
    // remainders (the lower index on a tie), so the total is kept exactly.
    let mut out: Vec<u64> = share.iter().map(|s| s.floor().max(0.0) as u64).collect();
    let units = total.saturating_sub(out.iter().sum());
    let mut by_remainder: Vec<usize> = (0..n).collect();
    by_remainder
        .sort_by(|&a, &b| (share[b] - share[b].floor()).total_cmp(&(share[a] - share[a].floor())).then(a.cmp(&b)));
    for &i in by_remainder.iter().take(usize::try_from(units).unwrap_or(n)) {
        out[i] += 1;
    }
    out.into_iter().map(|x| u32::try_from(x).unwrap_or(u32::MAX).max(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without headroom, so that shares are of the cluster itself.
    fn plain() -> Params {
        Params { remote_headroom: 1.0, ..Params::default() }
    }

    #[test]
    fn two_backlogs_split_evenly() {
        for cluster in [1_u64, 2, 7, 100, 1001, 64_000] {
            let limits = fair_remote_limits(cluster, 0.0, &[10_000, 5_000], &plain());
            let total: u64 = limits.iter().map(|l| u64::from(*l)).sum();
            assert_eq!(total, cluster.max(2), "cluster {cluster}: {limits:?}");
            if cluster >= 20 {
                for l in &limits {
                    let share = f64::from(*l) / cluster as f64;
                    assert!((0.45..=0.55).contains(&share), "cluster {cluster}: {limits:?}");
                }
            }
        }
    }

    #[test]
    fn small_demand_gets_it_and_the_other_the_rest() {
        assert_eq!(fair_remote_limits(100, 0.0, &[10, 500], &plain()), vec![10, 90]);
        assert_eq!(fair_remote_limits(100, 0.0, &[500, 10, 30], &plain()), vec![60, 10, 30]);
        // Three-way: one small, two share the rest.
        assert_eq!(fair_remote_limits(100, 0.0, &[200, 4, 200], &plain()), vec![48, 4, 48]);
    }

    #[test]
    fn spare_capacity_is_spread_evenly() {
        let limits = fair_remote_limits(100, 0.0, &[10, 20], &plain());
        assert_eq!(limits, vec![45, 55]);
    }

    #[test]
    fn hit_ratio_raises_the_total_with_a_cap() {
        let p = plain();
        assert_eq!(remote_total(100, 0.0, &p), 100);
        assert_eq!(remote_total(100, 0.5, &p), 200);
        assert_eq!(remote_total(100, 0.9, &p), 400, "capped at 4x");
        assert_eq!(remote_total(100, 1.0, &p), 400);
        assert_eq!(remote_total(100, f64::NAN, &p), 100);
        assert_eq!(remote_total(100, -3.0, &p), 100);
        let limits = fair_remote_limits(100, 0.5, &[1_000, 1_000], &p);
        assert_eq!(limits, vec![100, 100]);
        assert_eq!(remote_total(100, 0.0, &Params::default()), 125, "default headroom");
    }

    #[test]
    fn nobody_gets_zero_while_capacity_exists() {
        let demand = vec![50; 300];
        let limits = fair_remote_limits(10, 0.0, &demand, &plain());
        assert_eq!(limits.len(), 300);
        assert!(limits.iter().all(|l| *l == 1), "{limits:?}");
        let limits = fair_remote_limits(1, 0.0, &[0, 0, 9], &plain());
        assert_eq!(limits, vec![1, 1, 1]);
    }

    #[test]
    fn idle_consumerds_get_a_floor_to_start() {
        let limits = fair_remote_limits(100, 0.0, &[0, 1_000], &plain());
        assert_eq!(limits, vec![2, 98]);
    }

    #[test]
    fn no_capacity_sends_nothing_remote() {
        assert_eq!(fair_remote_limits(0, 0.9, &[5, 0], &plain()), vec![0, 0]);
        assert!(fair_remote_limits(100, 0.0, &[], &plain()).is_empty());
    }
}
