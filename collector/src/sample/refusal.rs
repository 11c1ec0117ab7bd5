//! Why sampling could not start, said in one line with the cause and the fix. The job runs on
//! without samples; there is no signal-based fallback.

use std::fmt;

/// The step the kernel refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// `perf_event_open` itself.
    Open,
    /// Mapping an event's ring (locked memory beyond `kernel.perf_event_mlock_kb`).
    Mmap,
    /// Nothing to sample on (no online CPU read), or an architecture the unwinder lacks.
    Unsupported,
}

/// Sampling refused: the errno, the stage, and `kernel.perf_event_paranoid` as read from
/// `/proc` when it happened (`None`: no such file, a kernel without perf events).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) errno: i32,
    pub(crate) stage: Stage,
    pub(crate) paranoid: Option<i32>,
}

impl Refusal {
    pub(crate) fn new(stage: Stage, error: &std::io::Error) -> Refusal {
        Refusal { errno: error.raw_os_error().unwrap_or(0), stage, paranoid: super::attr::paranoid() }
    }
}

/// The symbolic name of the errnos the kernel answers perf_event_open and mmap with.
fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::ENOENT => "ENOENT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOMEM => "ENOMEM",
        libc::E2BIG => "E2BIG",
        libc::ENODEV => "ENODEV",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.stage {
            Stage::Open => "perf_event_open refused",
            Stage::Mmap => "perf event ring refused",
            Stage::Unsupported => "sampling unsupported",
        };
        let errno = errno_name(self.errno);
        let denied = self.errno == libc::EACCES || self.errno == libc::EPERM;
        match (self.stage, self.paranoid) {
            (Stage::Unsupported, _) => {
                write!(f, "{what}: no online CPU to sample on, or a CPU architecture the unwinder lacks")
            }
            (Stage::Mmap, _) if denied => write!(
                f,
                "{what} ({errno}): the rings exceed the locked memory allowed (kernel.perf_event_mlock_kb \
                 per CPU, then `ulimit -l`); run `sysctl kernel.perf_event_mlock_kb=2048` or raise `ulimit -l`"
            ),
            (Stage::Open, Some(level)) if denied && level >= 3 => write!(
                f,
                "{what} ({errno}): kernel.perf_event_paranoid is {level}, which forbids it to unprivileged \
                 users; run `sysctl kernel.perf_event_paranoid=2` or give the collector CAP_PERFMON"
            ),
            (Stage::Open, Some(level)) if denied => write!(
                f,
                "{what} ({errno}) though kernel.perf_event_paranoid is {level}: a seccomp filter or a \
                 security module blocks it (a container's default profile does); run the container with \
                 `--cap-add PERFMON` (or `--security-opt seccomp=unconfined`)"
            ),
            (Stage::Open, None) => write!(
                f,
                "{what} ({errno}): this kernel has no perf events (no /proc/sys/kernel/perf_event_paranoid); \
                 sampling needs a kernel built with CONFIG_PERF_EVENTS"
            ),
            (Stage::Open, Some(_)) if self.errno == libc::ENOSYS => write!(
                f,
                "{what} (ENOSYS): a seccomp filter answers the system call as missing (a container's \
                 profile does); run the container with `--cap-add PERFMON` or `--security-opt seccomp=unconfined`"
            ),
            (Stage::Open, Some(_)) if self.errno == libc::EMFILE => write!(
                f,
                "{what} (EMFILE): one descriptor per CPU exceeds the open-file limit; raise `ulimit -n`"
            ),
            (_, _) => write!(
                f,
                "{what} ({errno}): the kernel does not offer the cpu-clock sampling this needs \
                 (Linux 4.1 or later with software events); sample on a newer kernel"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paranoid_3_says_the_sysctl_and_the_capability() {
        let refusal = Refusal { errno: libc::EACCES, stage: Stage::Open, paranoid: Some(3) };
        assert_eq!(
            refusal.to_string(),
            "perf_event_open refused (EACCES): kernel.perf_event_paranoid is 3, which forbids it to \
             unprivileged users; run `sysctl kernel.perf_event_paranoid=2` or give the collector CAP_PERFMON"
        );
    }

    #[test]
    fn a_permissive_paranoid_points_at_seccomp() {
        let refusal = Refusal { errno: libc::EPERM, stage: Stage::Open, paranoid: Some(2) };
        let line = refusal.to_string();
        assert!(
            line.starts_with(
                "perf_event_open refused (EPERM) though kernel.perf_event_paranoid is 2: a seccomp filter"
            ),
            "{line}"
        );
        assert!(line.contains("--cap-add PERFMON"), "{line}");
    }

    #[test]
    fn every_refusal_is_one_line() {
        for stage in [Stage::Open, Stage::Mmap, Stage::Unsupported] {
            for errno in [libc::EACCES, libc::EPERM, libc::ENOSYS, libc::EINVAL, libc::EMFILE, 9999] {
                for paranoid in [None, Some(-1), Some(2), Some(4)] {
                    let line = Refusal { errno, stage, paranoid }.to_string();
                    assert!(!line.contains('\n') && line.len() < 300, "{line}");
                }
            }
        }
        let mmap = Refusal { errno: libc::EPERM, stage: Stage::Mmap, paranoid: Some(2) }.to_string();
        assert!(mmap.starts_with("perf event ring refused (EPERM): the rings exceed"), "{mmap}");
    }
}
