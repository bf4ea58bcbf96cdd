//! Both programs allocate through mimalloc and keep what they free for reuse.
//!
//! By default mimalloc returns freed memory to the OS after 10 ms, and the next allocation
//! of that size faults fresh pages in again, each zeroed by the kernel. Both programs free
//! big buffers over and over: `histcheck` its row vectors as they grow by doubling, and
//! `histingest` every row group's column buffers once written (then builds the next row
//! group's of the same size); the kernel's page zeroing and the faults took more time than
//! some of the work itself (docs/checkers.md). Their working sets are bounded, so keeping
//! freed memory does not grow them.

extern "C" {
    // mimalloc's own API (linked in with the global allocator).
    fn mi_option_set(option: i32, value: std::ffi::c_long);
}
/// `mi_option_purge_delay` in mimalloc 2's `mi_option_e` (the version Cargo.lock pins).
const MI_OPTION_PURGE_DELAY: i32 = 15;

/// Keep freed memory for reuse instead of returning it to the OS. Call first thing in
/// main, before any thread starts.
pub fn keep_freed_memory() {
    // SAFETY: sets one integer option, before any other thread runs.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}
