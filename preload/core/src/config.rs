//! The `MLPROF_*` options read by the library (documented in `mlprof_format::options`). Read
//! once per process, at join time, with `getenv` (no allocation) into fixed buffers.

use core::ffi::CStr;

/// What the environment asks of the library.
pub struct Config {
    shm_path: [u8; 256],
    shm_path_len: usize,
    /// The segment was named by the launcher (`MLPROF_SHM`): it belongs to one run, so once it
    /// closes there is nothing to join again (a session's name, by contrast, is served again
    /// by the next collector of the session).
    pub launcher: bool,
    /// `MLPROF_CLOCK=events`: a record per clock read instead of counters.
    pub clock_events: bool,
    /// `MLPROF_QUIET`: no "no session" line.
    pub quiet: bool,
    /// `MLPROF_DISABLE`: record nothing.
    pub disabled: bool,
    /// Time one clock read in this many (a power of two).
    pub clock_timing_every: u32,
}

pub(crate) fn getenv(name: &CStr) -> Option<&'static [u8]> {
    // Safety: getenv reads the process environment without allocating; the returned string lives
    // in the environment block. The library never calls setenv, and callers copy what they keep.
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // Safety: getenv returns a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(value) }.to_bytes())
}

fn is_on(value: Option<&[u8]>) -> bool {
    matches!(value, Some(b"1" | b"yes" | b"true" | b"on"))
}

/// Whether the on/off option `name` is on (`1`, `yes`, `true`, `on`), for an option read
/// outside joining (complete mode's, read by the constructor).
pub fn flag(name: &CStr) -> bool {
    is_on(getenv(name))
}

impl Config {
    /// The options of this process's environment, for a process of effective user `uid`.
    pub fn from_env(uid: u32) -> Config {
        Config::from_lookup(uid, getenv)
    }

    /// The options as `lookup` gives the variables.
    pub fn from_lookup<'a>(uid: u32, lookup: impl Fn(&CStr) -> Option<&'a [u8]>) -> Config {
        let mut config = Config {
            shm_path: [0; 256],
            shm_path_len: 0,
            launcher: false,
            clock_events: lookup(c"MLPROF_CLOCK") == Some(b"events"),
            quiet: is_on(lookup(c"MLPROF_QUIET")),
            disabled: is_on(lookup(c"MLPROF_DISABLE")),
            clock_timing_every: lookup(c"MLPROF_CLOCK_TIMING").map_or(64, parse_power_of_two),
        };
        match lookup(c"MLPROF_SHM") {
            Some(path) if !path.is_empty() => {
                config.launcher = true;
                config.push(path);
            }
            _ => {
                let session = lookup(c"MLPROF_SESSION").filter(|s| !s.is_empty()).unwrap_or(b"default");
                config.push(lookup(c"MLPROF_SHM_DIR").filter(|d| !d.is_empty()).unwrap_or(b"/dev/shm"));
                config.push(b"/mlprof-");
                let mut digits = [0u8; 10];
                config.push(format_u32(uid, &mut digits));
                config.push(b"-");
                config.push(session);
            }
        }
        config
    }

    /// Appends to the segment path, cutting what does not fit (leaving room for a NUL).
    fn push(&mut self, bytes: &[u8]) {
        let room = self.shm_path.len() - 1;
        let free = self.shm_path.get_mut(self.shm_path_len..room).unwrap_or_default();
        self.shm_path_len += crate::sys::copy_prefix(free, bytes);
    }

    /// The segment to join: `MLPROF_SHM` (the launcher's run), else the session's
    /// (`$MLPROF_SHM_DIR/mlprof-UID-SESSION`, `/dev/shm` by default, session from
    /// `MLPROF_SESSION` or `default`).
    pub fn shm_path(&self) -> &[u8] {
        self.shm_path.get(..self.shm_path_len).unwrap_or_default()
    }

    /// [`Config::shm_path`] with its NUL.
    pub fn shm_path_c(&self) -> Option<&core::ffi::CStr> {
        CStr::from_bytes_until_nul(self.shm_path.get(..=self.shm_path_len)?).ok()
    }
}

/// Decimal digits of `value` without allocation.
pub fn format_u32(mut value: u32, buf: &mut [u8; 10]) -> &[u8] {
    // u32::MAX has 10 digits, so `at` never goes below 0.
    let mut at = buf.len();
    while at > 0 {
        at -= 1;
        if let Some(digit) = buf.get_mut(at) {
            *digit = b'0' + (value % 10) as u8;
        }
        value /= 10;
        if value == 0 {
            break;
        }
    }
    buf.get(at..).unwrap_or_default()
}

/// A positive decimal, rounded up to a power of two and capped at 2^20; bad input gives 64.
fn parse_power_of_two(text: &[u8]) -> u32 {
    let mut value: u32 = 0;
    for &digit in text {
        if !digit.is_ascii_digit() || value > 1 << 20 {
            return 64;
        }
        value = value * 10 + (digit - b'0') as u32;
    }
    if value == 0 { 64 } else { value.min(1 << 20).next_power_of_two() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&CStr, &'static [u8])]) -> Config {
        let vars = vars.to_vec();
        Config::from_lookup(1000, move |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v))
    }

    #[test]
    fn session_segment_name_comes_from_uid_and_session() {
        assert_eq!(config(&[]).shm_path(), b"/dev/shm/mlprof-1000-default");
        assert!(!config(&[]).launcher);
        assert_eq!(config(&[(c"MLPROF_SESSION", b"exp1")]).shm_path(), b"/dev/shm/mlprof-1000-exp1");
        assert_eq!(config(&[(c"MLPROF_SESSION", b"")]).shm_path(), b"/dev/shm/mlprof-1000-default");
        let moved = config(&[(c"MLPROF_SHM_DIR", b"/big/tmpfs"), (c"MLPROF_SESSION", b"s")]);
        assert_eq!(moved.shm_path(), b"/big/tmpfs/mlprof-1000-s");
        let launcher =
            config(&[(c"MLPROF_SHM", b"/dev/shm/mlprof-1000-run-42-ab"), (c"MLPROF_SESSION", b"x")]);
        assert_eq!(launcher.shm_path(), b"/dev/shm/mlprof-1000-run-42-ab");
        assert!(launcher.launcher);
        assert_eq!(launcher.shm_path_c().unwrap().to_bytes(), launcher.shm_path());
    }

    #[test]
    fn a_name_too_long_is_cut_not_overflowed() {
        let long: &'static [u8] = &[b'x'; 300];
        assert_eq!(config(&[(c"MLPROF_SHM", long)]).shm_path().len(), 255);
        assert_eq!(config(&[(c"MLPROF_SESSION", long)]).shm_path().len(), 255);
        assert!(config(&[(c"MLPROF_SHM", long)]).shm_path_c().is_some());
    }

    #[test]
    fn switches_and_clock_timing() {
        let c = config(&[(c"MLPROF_QUIET", b"1"), (c"MLPROF_DISABLE", b"yes"), (c"MLPROF_CLOCK", b"events")]);
        assert!(c.quiet && c.disabled && c.clock_events);
        let c = config(&[(c"MLPROF_QUIET", b"0"), (c"MLPROF_CLOCK", b"aggregate")]);
        assert!(!c.quiet && !c.disabled && !c.clock_events);
        assert_eq!(config(&[]).clock_timing_every, 64);
        assert_eq!(config(&[(c"MLPROF_CLOCK_TIMING", b"1")]).clock_timing_every, 1);
        assert_eq!(config(&[(c"MLPROF_CLOCK_TIMING", b"100")]).clock_timing_every, 128);
        assert_eq!(config(&[(c"MLPROF_CLOCK_TIMING", b"0")]).clock_timing_every, 64);
        assert_eq!(config(&[(c"MLPROF_CLOCK_TIMING", b"-3")]).clock_timing_every, 64);
        assert_eq!(config(&[(c"MLPROF_CLOCK_TIMING", b"99999999999")]).clock_timing_every, 64);
        assert_eq!(config(&[(c"MLPROF_CLOCK_TIMING", b"5000000")]).clock_timing_every, 1 << 20);
    }

    #[test]
    fn decimal_digits() {
        let mut buf = [0u8; 10];
        assert_eq!(format_u32(0, &mut buf), b"0");
        assert_eq!(format_u32(1000, &mut buf), b"1000");
        assert_eq!(format_u32(u32::MAX, &mut buf), b"4294967295");
    }
}
