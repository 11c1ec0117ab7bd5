//! What the GPU timeline collects, as the environment asks (default: everything), read once
//! when it starts, without allocating:
//!
//! * `MLPROF_CUPTI_KINDS`: the activity kinds, a comma list of `kernel`, `memcpy`, `memset`,
//!   `sync`, `overhead` (unknown names are ignored; an empty list collects nothing);
//! * `MLPROF_CUPTI_LINKS=off`: no subscriber callback, so GPU work is not linked to its calls
//!   (the callback runs at the entry of every launch, copy and memset);
//! * `MLPROF_CUPTI_CLOCK=calibrate`: no timestamp callback; CUPTI's clock is calibrated onto the
//!   run's instead (see `super::calibrate`).
//!
//! They exist to measure what each part costs and to leave out what a job cannot afford.

use super::records::{KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_OVERHEAD, KIND_SYNCHRONIZATION};
use crate::config;

/// The kinds by the names `MLPROF_CUPTI_KINDS` takes, in the order they are enabled (kernels
/// first: the one that matters).
const NAMED_KINDS: [(&[u8], u32); 5] = [
    (b"kernel", KIND_CONCURRENT_KERNEL),
    (b"memcpy", KIND_MEMCPY),
    (b"memset", KIND_MEMSET),
    (b"sync", KIND_SYNCHRONIZATION),
    (b"overhead", KIND_OVERHEAD),
];

/// The kinds to enable, in order.
#[derive(Clone, Copy, Default)]
pub struct Kinds {
    kinds: [u32; NAMED_KINDS.len()],
    len: usize,
}

impl Kinds {
    pub fn as_slice(&self) -> &[u32] {
        self.kinds.get(..self.len).unwrap_or_default()
    }
}

#[derive(Clone, Copy)]
pub struct Options {
    pub kinds: Kinds,
    /// Whether calls learn their correlation ids (the subscriber callback).
    pub links: bool,
    /// Whether CUPTI is asked to stamp records with the run's clock.
    pub timestamp_callback: bool,
}

/// Every kind (what a stand-down turns off).
pub fn all_kinds() -> Kinds {
    kinds(None)
}

/// The options of this process's environment.
pub fn read() -> Options {
    Options {
        kinds: kinds(config::getenv(c"MLPROF_CUPTI_KINDS")),
        links: !matches!(config::getenv(c"MLPROF_CUPTI_LINKS"), Some(b"off" | b"0" | b"no")),
        timestamp_callback: config::getenv(c"MLPROF_CUPTI_CLOCK") != Some(b"calibrate"),
    }
}

/// The kinds a `MLPROF_CUPTI_KINDS` value names (unset: all), in [`NAMED_KINDS`]' order.
fn kinds(list: Option<&[u8]>) -> Kinds {
    let mut chosen = Kinds::default();
    for (name, kind) in NAMED_KINDS {
        let wanted = list.is_none_or(|list| list.split(|&b| b == b',').any(|item| item.trim_ascii() == name));
        if wanted && let Some(slot) = chosen.kinds.get_mut(chosen.len) {
            *slot = kind;
            chosen.len += 1;
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_means_every_kind_kernels_first() {
        assert_eq!(kinds(None).as_slice(), &[10, 1, 2, 38, 17]);
    }

    #[test]
    fn a_list_picks_its_kinds_in_enabling_order_and_ignores_unknown_names() {
        assert_eq!(kinds(Some(b"memcpy, kernel,bogus")).as_slice(), &[KIND_CONCURRENT_KERNEL, KIND_MEMCPY]);
        assert_eq!(kinds(Some(b"")).as_slice(), &[] as &[u32]);
    }
}
