//! Process set-up shared by both controller binaries: the glibc malloc arena cap and the
//! async runtime's thread counts, which together keep the resident memory small and steady.

/// The glibc malloc arena cap the controller runs with unless `MALLOC_ARENA_MAX` (or an
/// `arena_max` tunable) is set.
const MALLOC_ARENA_MAX: &str = "2";

/// Whether the environment leaves glibc's arena count at its default (8 per core).
fn arena_count_unset(
    arena_max: Option<&std::ffi::OsStr>,
    tunables: Option<&std::ffi::OsStr>,
) -> bool {
    arena_max.is_none()
        && !tunables.is_some_and(|t| t.to_string_lossy().contains("glibc.malloc.arena_max"))
}

/// glibc gives each thread that allocates its own arena, up to 8 per core, and each arena keeps
/// its own freed memory: with the controller's few threads that was about 40% of the heap. The
/// cap can only be set before the first allocation (`MALLOC_ARENA_MAX` is read at start-up, and
/// `mallopt` would need `unsafe`), so the process replaces itself once with the variable set.
/// If that fails it just runs on with glibc's default.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn cap_malloc_arenas_impl(name: &str) {
    use std::os::unix::process::CommandExt;
    if !arena_count_unset(
        std::env::var_os("MALLOC_ARENA_MAX").as_deref(),
        std::env::var_os("GLIBC_TUNABLES").as_deref(),
    ) {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    // `exec` only returns on failure.
    let err = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env("MALLOC_ARENA_MAX", MALLOC_ARENA_MAX)
        .exec();
    eprintln!("{name}: running with glibc's default malloc arenas: {err}");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn cap_malloc_arenas_impl(_name: &str) {}

/// How long an idle blocking-pool thread waits for more work before it exits.
const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(60);

/// Async worker and blocking-pool thread counts for `cores` CPUs and `--concurrent` workers.
///
/// The async workers only move bytes and JSON: everything CPU-heavy (pack parsing, checkout,
/// packaging, digests) runs on the blocking pool, at most one task per reconcile at a time. Each
/// thread that allocates gets its own glibc malloc arena (up to 8 per core), and every arena keeps
/// its own free memory, so fewer threads means a smaller, steadier RSS: two async workers at
/// most, and a blocking pool sized for the reconcile workers plus a few for file serving and
/// name lookups.
pub fn runtime_threads(cores: usize, concurrent: u16) -> (usize, usize) {
    let workers = cores.clamp(1, 2);
    let blocking = usize::from(concurrent.max(1)) + 2;
    (workers, blocking)
}

/// Caps glibc's malloc arenas (see the module documentation): on Linux with glibc, unless the
/// user set `MALLOC_ARENA_MAX` or an `arena_max` tunable, the process replaces itself once with
/// the variable set. `name` prefixes the message printed if that fails.
pub fn cap_malloc_arenas(name: &str) {
    cap_malloc_arenas_impl(name);
}

/// The stack of every runtime thread. Our own recursion on tenant input is bounded well below
/// tokio's default 2 MiB (builds, YAML, substitution), but third-party parsers are not all
/// bounded (the `cel` crate's parser overflows a 2 MiB stack at about 15 nested parentheses in
/// a debug build): 8 MiB of address space per thread, touched only when used.
pub const THREAD_STACK_BYTES: usize = 8 << 20;

/// The controller's multi-threaded runtime, sized by [`runtime_threads`] for `--concurrent`.
pub fn build_runtime(concurrent: u16) -> std::io::Result<tokio::runtime::Runtime> {
    let (workers, blocking) = runtime_threads(
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        concurrent,
    );
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .max_blocking_threads(blocking)
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .thread_stack_size(THREAD_STACK_BYTES)
        .enable_all()
        .build()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn arenas_are_capped_only_when_the_user_did_not_choose() {
        use std::ffi::OsStr;
        assert!(arena_count_unset(None, None));
        assert!(arena_count_unset(
            None,
            Some(OsStr::new("glibc.malloc.trim_threshold=1"))
        ));
        assert!(!arena_count_unset(Some(OsStr::new("8")), None));
        assert!(!arena_count_unset(
            None,
            Some(OsStr::new(
                "glibc.malloc.arena_max=4:glibc.malloc.tcache_count=0"
            ))
        ));
    }

    #[test]
    fn runtime_threads_are_few_and_follow_concurrency() {
        assert_eq!(runtime_threads(1, 4), (1, 6));
        assert_eq!(runtime_threads(2, 4), (2, 6));
        assert_eq!(runtime_threads(64, 4), (2, 6));
        assert_eq!(runtime_threads(8, 20), (2, 22));
        assert_eq!(runtime_threads(8, 0), (2, 3));
    }
}
