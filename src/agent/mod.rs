//! The agent: the compile executor, the CPU sampler, CPU-limited cgroups,
//! and the store and sandbox of toolchains shipped to it (toolchain discovery, shared with the consumerd, is
//! [`crate::toolchain`]).

pub mod cgroup;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod executor;
pub mod sampler;
#[cfg(feature = "daemon")]
pub mod shipped;
#[cfg(feature = "daemon")]
pub mod work;

/// Fixes glibc malloc's thresholds for a daemon that now and then handles
/// buffers of megabytes (an agent: sources, objects, compressed frames):
/// allocations of 1 MiB and more are mapped on their own and unmapped when
/// freed, and an arena's free top beyond 4 MiB goes back to the system.
/// Left alone, glibc raises both thresholds each time it frees a large
/// mapped block (up to 32 MiB and 64 MiB), after which every arena keeps
/// that much freed memory: an agent of the soak (`scripts/soak --duration
/// 60`) grew from 57 to 104–131 MiB with about 10 MiB in use; with these,
/// 25 to 56–68 MiB. Call before any thread starts; nothing with another
/// allocator.
pub fn bound_retained_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        #[allow(unsafe_code)]
        // SAFETY: mallopt takes no pointer; it sets two of malloc's tunables
        // and is called before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 4 << 20);
        }
    }
}
