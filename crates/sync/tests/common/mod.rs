//! Thread counts for the stress tests, derived from the machine that runs them: every test
//! oversubscribes the CPUs this process may use (its affinity mask and cgroup quota, as
//! `available_parallelism` reports them) by a factor of 2 to 4, on 2 CPUs as on 64.

#![allow(dead_code)]

/// CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// `factor` threads per CPU, and at least `min`.
pub fn per_cpu(factor: usize, min: usize) -> usize {
    (factor * cpus()).max(min)
}
