//! Both programs end with the process that started them (the checker, or a Spark task's
//! Python worker): a parent killed outright (SIGKILL, an OOM kill, Spark stopping its
//! workers) cannot stop them, and they would otherwise read on, for minutes at 100M
//! operations, into tables nobody will use.

use std::ffi::c_int;

extern "C" {
    fn prctl(option: c_int, ...) -> c_int;
}

const PR_SET_PDEATHSIG: c_int = 1;
const SIGKILL: c_int = 9;

/// Asks the kernel for SIGKILL when the parent ends. (A parent that died in the instant
/// before this is not caught: its pid cannot be told from a parent that is pid 1, as the
/// harness's Python is in some containers.)
pub fn die_with_parent() {
    // SAFETY: prctl(PR_SET_PDEATHSIG, signal) only sets this process's own attribute.
    unsafe {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    }
}
