//! The `MLPROF_*` options read by the library (documented in `mlprof_format::options`). Read once per process, at join time,
//! with `getenv` (no allocation) into fixed buffers.

use core::ffi::CStr;

pub struct Config {
    pub shm_name: [u8; 128],
    pub shm_name_len: usize,
    pub clock_events: bool,
    pub quiet: bool,
    pub disabled: bool,
    /// Time one clock read in this many (a power of two).
    pub clock_timing_every: u32,
}

fn env(name: &CStr) -> Option<&'static [u8]> {
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

impl Config {
    pub fn from_env(uid: u32) -> Config {
        let mut config = Config {
            shm_name: [0; 128],
            shm_name_len: 0,
            clock_events: env(c"MLPROF_CLOCK") == Some(b"events"),
            quiet: is_on(env(c"MLPROF_QUIET")),
            disabled: is_on(env(c"MLPROF_DISABLE")),
            clock_timing_every: env(c"MLPROF_CLOCK_TIMING").map_or(64, parse_power_of_two),
        };
        match env(c"MLPROF_SHM") {
            Some(name) if !name.is_empty() => config.push(name),
            _ => {
                let session = env(c"MLPROF_SESSION").filter(|s| !s.is_empty()).unwrap_or(b"default");
                config.push(b"/mlprof-");
                let mut digits = [0u8; 10];
                config.push(format_u32(uid, &mut digits));
                config.push(b"-");
                config.push(session);
            }
        }
        config
    }

    fn push(&mut self, bytes: &[u8]) {
        let room = self.shm_name.len() - self.shm_name_len;
        let take = bytes.len().min(room);
        self.shm_name[self.shm_name_len..self.shm_name_len + take].copy_from_slice(&bytes[..take]);
        self.shm_name_len += take;
    }

    pub fn shm_name(&self) -> &[u8] {
        &self.shm_name[..self.shm_name_len]
    }
}

/// Decimal digits of `value` without allocation.
pub fn format_u32(mut value: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    &buf[at..]
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
